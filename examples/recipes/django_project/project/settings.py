"""Settings of the recipe's project: only what a management command needs, plus the lease URL."""

import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "recipe-only-not-a-secret")
DEBUG = False
INSTALLED_APPS = ["reports"]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": BASE_DIR / "app.db"}}
USE_TZ = True

#: The leases' database: often the app's own PostgreSQL (``postgresql://...``) or a SQLite file.
SQL_LEASE_DATABASE_URL = os.environ.get(
    "SQL_LEASE_DATABASE_URL", f"sqlite:///{BASE_DIR / 'leases.db'}"
)
