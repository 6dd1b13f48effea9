"""One module per command; each exports a click command. The CLI adds them in this order."""

from .explain import explain

COMMANDS = [explain]
