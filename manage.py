#!/usr/bin/env python
"""Django's command-line utility for engram."""

from __future__ import annotations

from config.cli import main

if __name__ == "__main__":
    main()
