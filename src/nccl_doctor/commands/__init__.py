"""One module per command; each exports a click command of its own name. The CLI lists them in this order and
imports a command's module only when that command runs (or --help lists them): `logs` starts without loading
`check`'s cluster layer, and `check` without the ~4,400 log signatures."""

COMMANDS = ("env", "lint", "check", "bench", "explain", "logs", "topo", "watch")
