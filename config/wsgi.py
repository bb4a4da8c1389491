from __future__ import annotations

import os

from django.core.wsgi import get_wsgi_application

from config import deadlines
from config.middleware import ChunkedBodyMiddleware

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

# A chunked request body (no Content-Length) reaches Django read and measured.
application = ChunkedBodyMiddleware(get_wsgi_application())
# Web requests run their statements under the API's deadlines, tighter than a worker's.
deadlines.use("api")
