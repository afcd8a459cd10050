"""The pipeline's steps, one module each, named after the step (the order is
``addon/hooks/pipeline.py``'s ``STEPS``). Each is ``step(rpc, runtime)``, the
runtime typed by a protocol in the step's own module (what it reads of it):
no step imports ``addon/runtime/``."""
