"""Lint rules about variable names and values, judged against catalog/nccl_env.tsv and torch_env.tsv."""

from __future__ import annotations

import re
from collections.abc import Iterator

from ..catalog.env_vars import EnvVar, env_vars, lookup, suggest, version_tuple
from ..model import Evidence, Finding, Severity
from ..redact import redact
from .lint_context import Context, Setting
from ..roads import emits
from .nccl_parse import (NCCL_FUNCTIONS, PER_FUNCTION_SINCE, legacy_algo_proto, parse_algo_proto, stoi, strtoll,
                         torch_bool)

OWNED_ELSEWHERE = {"MASTER_PORT"}  # judged by the rendezvous rules
SIZE_SUFFIX = {"k": 1024, "m": 1024**2, "g": 1024**3}


def _plain_name(name: str) -> bool:
    return bool(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name))


JUDGED_PREFIXES = ("NCCL_", "TORCH_NCCL_")  # every name with these prefixes is known to the catalog
TYPO_PREFIXES = ("TORCH_", "GLOO_", "MASTER_", "TORCHELASTIC_")  # only near-misses of known names are reported


@emits("env-unknown-variable")
def unknown_variables(ctx: Context) -> Iterator[Finding]:
    """NCCL_* and TORCH_NCCL_* names nothing reads, with a did-you-mean (NCCL_DEBG -> NCCL_DEBUG).

    TORCH_*, GLOO_*, MASTER_* and TORCHELASTIC_* names are reported only when they are one typo away from
    a distributed variable (MASTER_ADDRESS -> MASTER_ADDR): PyTorch reads hundreds of TORCH_* variables
    outside distributed training.
    """
    for s in ctx.settings.values():
        if not _plain_name(s.name) or lookup(s.name):
            continue
        close = suggest(s.name)
        if not s.name.startswith(JUDGED_PREFIXES):
            if not s.name.startswith(TYPO_PREFIXES):
                continue
            close = [c for c in close if lookup(c).component != "torch"]
            if not close:
                continue
        if close:
            message = f"{s.name} is not read by NCCL or PyTorch; did you mean {close[0]}?"
            fix = [f"Rename it: `export {close[0]}={redact(s.name, s.value)}` (and unset {s.name})."]
        else:
            message = f"{s.name} is not read by any NCCL release nor by PyTorch: it has no effect"
            fix = [f"Remove {s.name}, or look up the setting you meant in `docs/lint.md`."]
        yield Finding("env-unknown-variable", Severity.WARNING, message, confidence=0.9 if close else 0.7,
                      evidence=[s.evidence()], fix=fix)


def best_replacement(var: EnvVar, version: tuple[int, ...] | None) -> str:
    """The replacement to suggest, following deprecated replacements this NCCL already supersedes."""
    replacement = var.replacement
    seen = {var.name}
    while replacement:
        target = lookup(replacement.split("=", 1)[0])
        if target is None or target.name in seen or target.status != "deprecated" or not target.replacement:
            break
        newer = lookup(target.replacement_name)
        if version and newer and newer.since and version < version_tuple(newer.since):
            break
        seen.add(target.name)
        replacement = target.replacement
    return replacement


def _replacement_fix(var: EnvVar, s: Setting, replacement: str) -> list[str]:
    if not replacement:
        return [f"Remove {s.name}: `unset {s.name}` (or delete it from {s.source})."]
    if "=" in replacement:
        return [f"Use `export {replacement}` instead and `unset {s.name}`."]
    target = lookup(replacement)
    if target is not None and target.read_as == var.read_as:
        return [f"Use `export {replacement}={redact(s.name, s.value)}` instead and `unset {s.name}`."]
    meaning = f" ({target.meaning})" if target and target.meaning else ""
    return [f"Use {replacement} instead{meaning} and `unset {s.name}`."]


def _older(version: tuple[int, ...] | None, than: str) -> bool:
    limit = version_tuple(than)
    return bool(version and limit and version < limit)


@emits("env-deprecated-variable", "env-plugin-variable", "env-removed-variable")
def retired_variables(ctx: Context) -> Iterator[Finding]:
    """Variables NCCL never read, no longer reads, reads only in a plugin, or that are deprecated, each with
    the replacement; judged against the NCCL this job loads when it is known."""
    version, shown = ctx.nccl_version, ctx.nccl_version_text
    for s in ctx.settings.values():
        var = lookup(s.name)
        if var is None:
            continue
        replacement = best_replacement(var, version)
        this = f" (this job's NCCL: {shown})" if version else ""
        if var.status == "removed":
            if _older(version, var.removed_in):
                continue  # this older NCCL still reads it
            when = f"NCCL {var.removed_in} removed it" if var.removed_in else "no current release reads it"
            yield Finding("env-removed-variable", Severity.WARNING, f"{s.name} has no effect: {when}{this}",
                          evidence=[s.evidence()], fix=_replacement_fix(var, s, replacement))
        elif var.status == "not-read":
            yield Finding("env-removed-variable", Severity.WARNING, f"{s.name} has no effect. {var.meaning}",
                          evidence=[s.evidence()], fix=_replacement_fix(var, s, replacement))
        elif var.status == "plugin":
            yield Finding("env-plugin-variable", Severity.WARNING,
                          f"{s.name} is read only by the {var.plugin} net plugin, not by NCCL itself. {var.meaning}",
                          confidence=0.6, evidence=[s.evidence()])
        elif var.status == "deprecated":
            if var.is_nccl and _older(version, var.deprecated_in):
                continue
            yield from _deprecated(ctx, s, var, replacement, this)
        elif var.is_nccl and _older(version, var.since):
            older_name = next((v.name for v in _replaced_by(var.name)), "")
            fix = [f"Upgrade NCCL to {var.since} or later"
                   + (f", or use {older_name} with this NCCL." if older_name else ".")]
            yield Finding("env-removed-variable", Severity.WARNING,
                          f"{s.name} was added in NCCL {var.since}; this job's NCCL {shown} does not read it",
                          evidence=[s.evidence()], fix=fix)


def _replaced_by(name: str) -> list[EnvVar]:
    return [v for v in env_vars().values() if v.replacement_name == name]


@emits("env-deprecated-variable")
def _deprecated(ctx: Context, s: Setting, var: EnvVar, replacement: str, this: str) -> Iterator[Finding]:
    """A deprecated NCCL or PyTorch variable and its replacement."""
    if var.is_nccl:
        since = f" since NCCL {var.deprecated_in}" if var.deprecated_in else ""
        message = f"{s.name} is deprecated{since}{this}" + (f"; use {replacement}" if replacement else "")
    else:
        message = f"{s.name} is deprecated: {var.meaning[:1].lower()}{var.meaning[1:]}"
        winner = ctx.get(replacement) if replacement else None
        if winner is not None and winner.value != s.value:
            message += f"; PyTorch uses {winner.shown} and ignores {s.shown}"
    evidence = [s.evidence()]
    yield Finding("env-deprecated-variable", Severity.WARNING, message, evidence=evidence,
                  fix=_replacement_fix(var, s, replacement) if replacement else [f"Remove {s.name}."])


# ------------------------------------------------------------------ values


@emits("env-invalid-value")
def _invalid(s: Setting, message: str, fix: str, severity: Severity = Severity.ERROR,
             cause: str = "env-invalid-value", confidence: float = 0.9) -> Finding:
    """A finding for a variable whose value NCCL or PyTorch does not accept."""
    return Finding(cause, severity, message, confidence=confidence, evidence=[s.evidence()], fix=[fix])


def _size_hint(value: str) -> int | None:
    m = re.fullmatch(r"\s*(\d+)\s*([kKmMgG])(?:i?[bB])?\s*", value)
    return int(m.group(1)) * SIZE_SUFFIX[m.group(2).lower()] if m else None


def _suggested_int(var: EnvVar, value: str) -> str:
    low = value.strip().lower()
    if low in ("true", "yes", "on", "y", "t"):
        return "1"
    if low in ("false", "no", "off", "n", "f"):
        return "0"
    size = _size_hint(value)
    if size is not None:
        return str(size)
    return var.values[0] if var.values else str(var.min if var.min is not None else 0)


def check_int(s: Setting, var: EnvVar) -> Iterator[Finding]:
    """NCCL_PARAM integers and booleans, read with strtoll(value, NULL, 0)."""
    if s.value == "":
        return
    r = strtoll(s.value)
    fix = f"Set a plain integer: `export {s.name}={_suggested_int(var, s.value)}`."
    if r.overflow:
        yield _invalid(s, f"{s.shown} does not fit in 64 bits: NCCL ignores it and uses the default ({var.default})",
                       fix)
        return
    if not r.complete:
        how = f"stops at {r.rest[:12]!r} and uses {r.value}" if r.consumed.strip() else \
            f"finds no number and uses 0{' (off)' if var.read_as == 'bool' else ''}"
        yield _invalid(s, f"{s.shown}: NCCL parses integers with strtoll, which {how}", fix)
        return
    if r.octal:
        yield _invalid(s, f"{s.shown}: the leading 0 makes strtoll read octal, so NCCL uses {r.value}",
                       f"Drop the leading zero: `export {s.name}={int(s.value.strip().lstrip('+-0') or 0)}`.",
                       Severity.WARNING)
    allowed = [int(v) for v in var.values]
    if allowed and r.value not in allowed:
        yield _invalid(s, f"{s.shown} is not one of {', '.join(var.values)}", f"Use one of {', '.join(var.values)}.",
                       Severity.WARNING, confidence=0.7)
    if (var.min is not None and r.value < var.min) or (var.max is not None and r.value > var.max):
        bounds = f"{var.min}..{var.max}" if var.max is not None else f">= {var.min}"
        yield _invalid(s, f"{s.shown} is outside the valid range {bounds}",
                       f"Use a value in {bounds}" + (f" (default {var.default})." if var.default else "."))


def check_enum(s: Setting, var: EnvVar, case_sensitive: bool) -> Iterator[Finding]:
    if s.value in var.values or (not case_sensitive and s.value.lower() in {v.lower() for v in var.values}):
        return
    values = ", ".join(var.values)
    other_case = next((v for v in var.values if v.lower() == s.value.strip().lower()), None)
    if other_case:
        yield _invalid(s, f"{s.shown}: the value is compared case-sensitively, so {s.value!r} is silently ignored",
                       f"`export {s.name}={other_case}`")
        return
    yield _invalid(s, f"{s.shown} is not one of {values}: it is ignored", f"Use one of {values}.")


def check_level(ctx: Context, s: Setting, var: EnvVar) -> Iterator[Finding]:
    """NCCL_P2P_LEVEL / NCCL_NET_GDR_LEVEL: exact level names (strcmp) or legacy digits; anything else is
    silently ignored and NCCL decides by itself."""
    if s.value in var.values or s.value[:1].isdigit():
        return
    aliases = ctx.limits.get("level_aliases", {})
    upper = s.value.strip().upper()
    values = ", ".join(var.values)
    if upper in var.values:
        why, fix = f"NCCL compares it case-sensitively, so {s.value!r} is silently ignored", f"`export {s.name}={upper}`"
    elif upper in aliases:
        why = f"{s.value!r} is nvidia-smi's word, not NCCL's: NCCL silently ignores it (NCCL's equivalent is " \
              f"{aliases[upper]})"
        fix = f"`export {s.name}={aliases[upper]}`"
    else:
        why, fix = f"not one of {values}: NCCL silently ignores it and decides by itself", f"Use one of {values}."
    yield _invalid(s, f"{s.shown}: {why}", fix)


@emits("algo-proto-override", "env-invalid-value")
def check_algo_proto(ctx: Context, s: Setting, var: EnvVar) -> Iterator[Finding]:
    """NCCL_ALGO / NCCL_PROTO values parsed as NCCL parses them: names this NCCL lacks, or overrides that leave
    nothing usable."""
    names = var.values
    what = "protocol" if var.read_as == "proto" else "algorithm"
    version = ctx.nccl_version
    if version and version < PER_FUNCTION_SINCE:
        if ";" in s.value or ":" in s.value:
            yield _invalid(s, f"{s.shown}: the 'function:list' syntax needs NCCL 2.24 or later; NCCL "
                              f"{ctx.nccl_version_text} reads the whole value as one list and ignores what it "
                              f"does not know", f"Use a plain comma list such as `{s.name}={','.join(names[:2])}`, "
                                                f"or upgrade NCCL.")
        else:
            unknown = [t for t in s.value.lstrip("^").split(",") if t and t.lower() not in {n.lower() for n in names}]
            if unknown:
                yield _invalid(s, f"{s.shown}: unknown {what} {', '.join(map(repr, unknown))}, which NCCL "
                                  f"{ctx.nccl_version_text} silently ignores", f"Use only {', '.join(names)}.",
                               Severity.WARNING)
        enabled = legacy_algo_proto(s.value, names)
        if not enabled:
            yield Finding("algo-proto-override", Severity.ERROR,
                          f"{s.shown} enables no {what} at all: collectives fail with 'no algorithm/protocol "
                          f"available'", evidence=[s.evidence()], fix=[f"`unset {s.name}`"])
        return
    parsed = parse_algo_proto(s.value, names)
    problems = parsed.errors + [f"unknown {what} '{t}'" for t in parsed.unknown] + \
        [f"unknown function '{f}' (functions: {', '.join(NCCL_FUNCTIONS)})" for f in parsed.unknown_functions]
    if problems:
        since = "" if version else " (NCCL 2.24+; older releases ignore unknown names)"
        yield _invalid(s, f"{s.shown}: {'; '.join(problems)}: NCCL fails communicator setup with "
                          f"ncclInvalidUsage{since}", f"Use only {', '.join(names)}, e.g. "
                                                      f"`{s.name}={names[0]}` or `{s.name}=^{names[-1]}`.")
        return
    empty = [f for f, chosen in parsed.enabled.items() if not chosen]
    if empty:
        yield Finding("algo-proto-override", Severity.ERROR,
                      f"{s.shown} leaves {', '.join(empty)} with no {what}: those collectives fail with "
                      f"'no algorithm/protocol available'", evidence=[s.evidence()], fix=[f"`unset {s.name}`"])


def check_flags(s: Setting, var: EnvVar) -> Iterator[Finding]:
    text = s.value[1:] if s.value.startswith("^") else s.value
    known = {v.lower() for v in var.values}
    unknown = [t for t in text.split(",") if t and t.strip().lower() not in known]
    if unknown:
        yield _invalid(s, f"{s.shown}: {', '.join(map(repr, unknown))} not known, ignored "
                          f"(known: {', '.join(var.values)})", f"Use only {', '.join(var.values)}.",
                       Severity.WARNING, confidence=0.8)


def check_torch(s: Setting, var: EnvVar) -> Iterator[Finding]:
    if var.read_as == "torch-bool":
        if torch_bool(s.value) is None:
            yield _invalid(s, f"{s.shown}: PyTorch accepts only 1/0, true/false, yes/no, t/f, y/n and raises "
                              f"'Invalid value for environment variable' at start-up", f"`export {s.name}=1` or `=0`.")
        return
    number = stoi(s.value)
    if number is None:
        yield _invalid(s, f"{s.shown}: PyTorch parses it with std::stoi, which raises at start-up",
                       f"Set an integer, e.g. `export {s.name}={var.values[0] if var.values else var.min or 0}`.")
        return
    if var.values and str(number) not in var.values:
        yield _invalid(s, f"{s.shown} is not one of {', '.join(var.values)}. {var.meaning}",
                       f"Use one of {', '.join(var.values)}.", Severity.WARNING)
    elif var.min is not None and number < var.min:
        yield _invalid(s, f"{s.shown} is below {var.min}", f"Use a value >= {var.min}.", Severity.WARNING)


def check_python_int(s: Setting, var: EnvVar) -> Iterator[Finding]:
    try:
        number = int(s.value)
    except ValueError:
        yield _invalid(s, f"{s.shown} is not an integer: torch.distributed / torchrun fail with ValueError",
                       f"Set an integer, e.g. `export {s.name}={var.min or 0}`.")
        return
    if (var.min is not None and number < var.min) or (var.max is not None and number > var.max):
        bounds = f"{var.min}..{var.max}" if var.max is not None else f">= {var.min}"
        yield _invalid(s, f"{s.shown} is outside {bounds}", f"Use a value in {bounds}.")


def check_list_spaces(s: Setting) -> Iterator[Finding]:
    if re.search(r",\s|\s,|^\s|\s$", s.value):
        clean = ",".join(part.strip() for part in s.value.split(","))
        yield _invalid(s, f"{s.shown}: spaces are part of the names matched, so ' name' matches no interface or "
                          f"device", f"`export {s.name}={clean}`")


def _quoted(value: str) -> bool:
    return len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'"


def invalid_values(ctx: Context) -> Iterator[Finding]:
    """Values of the wrong type, outside the allowed set or range, or in a syntax the reader does not
    understand (NCCL_PROTO, NCCL_ALGO incl. the 2.24 per-function syntax, case-sensitive levels such as
    NCCL_P2P_LEVEL=node, NCCL_IB_RETRY_CNT > 7, PyTorch booleans, RANK=abc)."""
    for s in ctx.settings.values():
        var = lookup(s.name)
        if var is None or s.name in OWNED_ELSEWHERE or var.status in ("removed", "not-read"):
            continue
        if _quoted(s.value):
            yield _invalid(s, f"{s.shown}: the quotes are part of the value (a docker-compose or config-file "
                              f"quoting mistake), so it matches nothing", f"Remove the quotes: "
                                                                          f"`{s.name}={s.value[1:-1]}`.")
            continue
        kind = var.read_as
        if kind in ("int", "bool"):
            yield from (check_int(s, var) if var.is_nccl else check_python_int(s, var))
        elif kind in ("enum", "enum-nocase"):
            yield from check_enum(s, var, case_sensitive=kind == "enum")
        elif kind == "level":
            yield from check_level(ctx, s, var)
        elif kind in ("algo", "proto"):
            yield from check_algo_proto(ctx, s, var)
        elif kind == "flags":
            yield from check_flags(s, var)
        elif kind in ("torch-bool", "torch-int"):
            yield from check_torch(s, var)
        elif kind in ("ifname", "hca", "gloo-ifname"):
            yield from check_list_spaces(s)


# ------------------------------------------------------------------ NCCL config files


@emits("env-invalid-value")
def nccl_conf_files(ctx: Context) -> Iterator[Finding]:
    """Lines of /etc/nccl.conf, ~/.nccl.conf or NCCL_CONF_FILE that NCCL reads differently from what they say:
    NCCL takes everything before '=' as the name and everything after as the value, untrimmed, quotes kept."""
    for conf in ctx.confs:
        path = conf["path"]
        if conf.get("origin") == "NCCL_CONF_FILE" and conf.get("exists") is False:
            setting = ctx.get("NCCL_CONF_FILE") or Setting("NCCL_CONF_FILE", path)
            yield _invalid(setting, f"NCCL_CONF_FILE={path} does not exist: NCCL reads nothing from it, and "
                                    f"because it is set NCCL skips ~/.nccl.conf as well",
                           "Point NCCL_CONF_FILE at an existing file, or `unset NCCL_CONF_FILE`.", Severity.WARNING)
        if conf.get("unavailable"):
            yield Finding("env-invalid-value", Severity.INFO, f"{path}: {conf['unavailable']}",
                          evidence=[Evidence(path, conf["unavailable"])])
        for entry in conf.get("entries", ()):
            yield from _conf_entry(path, entry)


@emits("env-invalid-value")
def _conf_entry(path: str, entry: dict) -> Iterator[Finding]:
    """One entry of an nccl.conf file that NCCL ignores or cannot read."""
    line = entry["line"]
    if "ignored" in entry:
        yield Finding("env-invalid-value", Severity.WARNING, f"{path}:{line} has no '=': NCCL ignores the line",
                      evidence=[Evidence(path, "(line without '=')", line)], confidence=0.6,
                      fix=[f"Write NAME=VALUE on line {line} of {path}, or delete it."])
        return
    name, value = entry["name"], entry["value"]
    shown = f"{name}={value}"
    clean_name = re.sub(r"^\s*export\s+", "", name).strip()
    if name != clean_name:
        yield Finding("env-invalid-value", Severity.ERROR,
                      f"{path}:{line}: NCCL takes everything before '=' as the name, so this line sets a variable "
                      f"named {name!r}, not {clean_name}", evidence=[Evidence(path, shown, line)],
                      fix=[f"Write `{clean_name}={value.strip()}` on line {line} of {path} (no spaces, no export)."])
    if value != value.rstrip():
        yield Finding("env-invalid-value", Severity.WARNING,
                      f"{path}:{line}: the trailing whitespace is part of {clean_name}'s value for NCCL",
                      evidence=[Evidence(path, repr(shown), line)], confidence=0.7,
                      fix=[f"Remove the trailing spaces (or Windows line ending) on line {line} of {path}."])


# ------------------------------------------------------------------ topology and graph files


@emits("nccl-graph-file")
def nccl_graph_files(ctx: Context) -> Iterator[Finding]:
    """NCCL_GRAPH_FILE / NCCL_TOPO_FILE (often left in /etc/nccl.conf by a VM image): they describe one machine
    type, and a file for another machine makes NCCL init fail ('XML Import Channel : dev 1 not found')."""
    files = (ctx.section("environment") or {}).get("files", {})
    gpus = ctx.physical_gpus
    for name in ("NCCL_GRAPH_FILE", "NCCL_TOPO_FILE"):
        s = ctx.get(name)
        if s is None:
            continue
        info = files.get(name, {})
        where = "" if s.source == "environment" else f" (set in {s.source}:{s.line})"
        fix = [f"Delete the {name} line from {s.source}" if s.source != "environment" else f"`unset {name}`"]
        devs = info.get("gpu_devs") or []
        if info.get("exists") is False:
            yield Finding("nccl-graph-file", Severity.WARNING, f"{s.shown}{where} names a file that does not exist",
                          confidence=0.6, evidence=[s.evidence()], fix=fix)
        elif gpus is not None and devs and max(devs) >= gpus:
            yield Finding("nccl-graph-file", Severity.ERROR,
                          f"{s.shown}{where} refers to GPUs {devs[0]}..{max(devs)} but this host has {gpus} GPU"
                          f"{'s' if gpus != 1 else ''}: NCCL init fails with a system error", evidence=[s.evidence()],
                          fix=fix)
        else:
            yield Finding("nccl-graph-file", Severity.WARNING,
                          f"{s.shown}{where} replaces NCCL's own topology detection with a fixed file",
                          confidence=0.5, evidence=[s.evidence()], fix=fix)
