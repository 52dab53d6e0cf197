"""Pure domain logic: keys, recipes, job states, manifests and errors.

Nothing here imports boto3, PIL or subprocess, so it tests without mocks.
"""
