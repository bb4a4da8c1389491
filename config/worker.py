"""Entry point of the Dramatiq worker: `dramatiq config.worker` (make run starts one).

Boots Django, which configures the broker and declares the actors (memory/apps.py).
"""

from __future__ import annotations

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django.setup()
