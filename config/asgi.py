from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

from config import deadlines

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

application = get_asgi_application()
# A web server: its requests run under the API's deadlines, as under config/wsgi.py.
deadlines.use("api")
