"""The pipeline's steps, one module each, named after the step (the order is
``addon/hooks/pipeline.py``'s ``STEPS``). Each is ``step(rpc, runtime)``."""
