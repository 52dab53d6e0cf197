"""mediajobs: turn uploads into their derivatives on AWS serverless, exactly once."""

__version__ = "0.1.0"
