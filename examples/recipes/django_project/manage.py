#!/usr/bin/env python
"""The minimal Django project of the exclusive-job recipe: ``python manage.py nightly_report``."""

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
