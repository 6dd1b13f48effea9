"""One module per command; each exports a click command. The CLI adds them in this order."""

from .check import check
from .env import env
from .explain import explain
from .lint import lint
from .logs import logs
from .topo import topo

COMMANDS = [env, lint, check, explain, logs, topo]
