"""One module per command; each exports a click command. The CLI adds them in this order."""

from .bench import bench
from .check import check
from .env import env
from .explain import explain
from .lint import lint
from .logs import logs
from .topo import topo
from .watch import watch

COMMANDS = [env, lint, check, bench, explain, logs, topo, watch]
