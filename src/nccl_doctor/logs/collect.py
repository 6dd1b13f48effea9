"""Former home of reading; logs/rules and logs/evidence.py still import the records from here."""

from .records import Collection, Event, Proc  # noqa: F401
