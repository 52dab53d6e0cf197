"""Recipe steps, one module each, behind the ``Step`` port (``service_layer/ports.py``)."""
