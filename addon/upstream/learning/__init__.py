"""Learned rates: the limits nodes enforce without saying, found from their
429s (``learned.py``, pure) and shared through Redis (``shared_learned.py``)."""
