"""The command-line entry point behind manage.py (in config/, where the environment is read)."""

from __future__ import annotations

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from django.core.management import execute_from_command_line

    if sys.argv[1:2] == ["migrate"]:
        from config import deadlines

        deadlines.use("migrate")
    execute_from_command_line(sys.argv)
