"""Recipe steps: one module per step, each behind the :class:`~mediajobs.service_layer.ports.Step`
port (a name, a strict parameters model, ``run(source, params, context, out_dir)``).

The composition root (``mediajobs.bootstrap.steps``) registers them, one line each; a
recipe's ``step`` names the one that runs it. A step that decodes untrusted images runs in
the bounded render child (:class:`mediajobs.adapters.isolated.IsolatedStep`).
"""
