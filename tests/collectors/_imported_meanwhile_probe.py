"""Imported by tests/collectors/test_prefetch.py: notes the thread that imported it."""

import threading

IMPORTED_IN = threading.current_thread().name
