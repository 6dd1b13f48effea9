"""Secrets never leave the host: the one place that decides what looks secret and hides it.

Two entry points. `redact(name, value)` is for a variable whose name is known: the whole value is hidden
when the name says it is a secret (HF_TOKEN, *_PASSWORD, ...), else the secret-looking parts of it.
`redact_text(text)` is for free text (a log line, a command line, a message): it hides

- credentials in URLs (`https://user:password@host` keeps the host), Slack webhook paths;
- `Authorization: Bearer ...` / `Basic ...` headers and bare `Bearer ...` tokens;
- `--password X`, `--hf-token=X`, `-api-key X` style arguments and `NAME=value` with a secret name;
- known token shapes: AWS key ids, Hugging Face, GitHub (`ghp_`, `github_pat_`), GitLab, OpenAI, Anthropic,
  Slack (`xox?-`), Google API keys, JWTs, private-key blocks (every line of one);
- long random-looking strings (hex, or mixed-case base64 with high entropy): API keys without a known shape.

The renderers call `redact_text` on every untrusted string they draw (render/literal.py) and `redact_json`
on the whole JSON report, so every command's output is covered, whatever produced the text.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from functools import cache
from typing import Any

REDACTED = "<redacted>"

# Words that make a variable name secret, matched against the name's parts (split on '_', '-' and '.').
SECRET_WORDS = frozenset({
    "TOKEN", "TOKENS", "SECRET", "SECRETS", "PASSWORD", "PASSWD", "PASS", "PWD", "PASSPHRASE", "CREDENTIAL",
    "CREDENTIALS", "CRED", "CREDS", "AUTH", "AUTHORIZATION", "COOKIE", "SESSION", "APIKEY", "KEY", "KEYS",
    "PRIVATE", "SIGNATURE", "SIG", "SAS", "DSN", "WEBHOOK", "BEARER", "OTP", "SALT",
})
SECRET_JOINED = ("APIKEY", "ACCESSKEY", "ACCOUNTKEY", "SECRETKEY", "PRIVATEKEY", "PASSWORD", "TOKEN", "SECRET",
                 "CREDENTIAL", "CONNECTIONSTRING")
# Names whose parts look secret but which hold nothing secret (the shell's working directory, a socket path).
NOT_SECRET_NAMES = frozenset({"PWD", "OLDPWD", "SSH_AUTH_SOCK"})
# Alone, too common in free text ("KEY=VALUE line", "key=default_pg/0") to hide what follows them there.
PROSE_NAMES = frozenset({"KEY", "KEYS"})

PRIVATE_KEY = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----[\s\S]*?"
                         r"(?:-----END [A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----|$)")
TOKEN_SHAPES = re.compile("|".join((
    r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}\b",  # AWS access key ids
    r"\bhf_[A-Za-z0-9]{30,}\b",  # Hugging Face
    r"\bgh[pousr]_[A-Za-z0-9]{30,}\b", r"\bgithub_pat_[A-Za-z0-9_]{30,}\b",  # GitHub
    r"\bglpat-[A-Za-z0-9_-]{20,}\b",  # GitLab
    r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}\b",  # OpenAI, Anthropic
    r"\bxox[abposre]-[A-Za-z0-9-]{10,}\b", r"\bxapp-[A-Za-z0-9-]{10,}\b",  # Slack tokens
    r"\bAIza[0-9A-Za-z_-]{35}\b",  # Google API keys
    r"\beyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\b",  # JWT
)))
URL_CREDENTIALS = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/@\s]+)@")
SLACK_WEBHOOK = re.compile(r"(?P<keep>hooks\.slack\.com/(?:services|workflows|triggers)/)[A-Za-z0-9/_-]+")
AUTHORIZATION = re.compile(r"(?i)(?P<keep>\b(?:proxy-)?authorization\s*[:=]\s*(?:(?:bearer|basic|token|digest|"
                           r"negotiate|apikey)\s+)?)[^\s\"',;]+")
BEARER = re.compile(r"(?i)(?P<keep>\bbearer\s+)[A-Za-z0-9._~+/=-]{8,}")
# A value after a secret name: `--password X`, `--hf-token=X`, `NAME=value` (the name judged by secret_name),
# `"password": "X"` and `token: X` (only the unmistakable words, as `key:` and `session:` are common in logs).
ARGUMENT = re.compile(r"(?P<keep>(?<![\w-])--?(?P<name>[A-Za-z][\w.-]*)(?:=|\s+))(?P<value>(?!-)[^\s\"']+)")
ASSIGNMENT = re.compile(r"(?P<keep>(?<![\w.-])(?P<name>[A-Za-z_][\w.-]*)=)(?P<value>[^\s;&\"',]+)")
STRONG_NAME = r"[\w.-]*(?:password|passwd|secret|token|api[_-]?key|access[_-]?key|private[_-]?key)[\w.-]*"
QUOTED = re.compile(rf"(?i)(?P<keep>[\"'](?P<name>{STRONG_NAME})[\"']\s*:\s*[\"'])(?P<value>[^\"']+)")
COLON = re.compile(rf"(?i)(?P<keep>(?<![\w.-])(?P<name>{STRONG_NAME})\s*:\s*)(?P<value>[^\s\"',;]+)")
LONG_RUN = re.compile(r"[^\s,;:/@=&?'\"()\[\]{}<>]{32}|[A-Za-z0-9/+]{32}")
TOKEN_SPLIT = re.compile(r"[\s,;:/@=&?'\"()\[\]{}<>]+")
BASE64_TOKEN = re.compile(r"(?<![A-Za-z0-9/+])[A-Za-z0-9][A-Za-z0-9/+]{31,}={0,2}(?![A-Za-z0-9/+=])")
# short segments joined by '-' or '.': a host, pod or container name (keys of known shapes are matched above)
HOST_LIKE = re.compile(r"[A-Za-z0-9]{1,16}(?:[-.][A-Za-z0-9]{1,16})+")
UUID = re.compile(r"(?:GPU-|MIG-)?[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def secret_name(name: str) -> bool:
    """True when the name says the value is a secret (HF_TOKEN, WANDB_API_KEY, AWS_SECRET_ACCESS_KEY, ...)."""
    upper = name.upper()
    if upper in NOT_SECRET_NAMES:
        return False
    parts = [p for p in re.split(r"[_\-.]+", upper) if p]
    if any(p in SECRET_WORDS for p in parts):
        return True
    joined = "".join(parts)
    return any(word in joined for word in SECRET_JOINED)


def redact(name: str, value: str) -> str:
    """A variable's value as it may be shown: all of it hidden for a secret name, secret-looking parts otherwise."""
    if secret_name(name):
        return REDACTED if value else value
    return redact_text(value)


# Everything redact_everything() can change holds one of these (any case): a word a secret name is made of (the
# words above, so that a word added there is screened too), the fixed text of a token shape, a URL's '://', a
# webhook's or a bearer token's, or a run of 32 characters a random key could be (LONG_RUN). Most log lines hold none.
SHAPE_HINTS = ("://", "hooks.slack", "bearer", "akia", "asia", "agpa", "aida", "aroa", "anpa", "anva", "aipa", "hf_",
               "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "glpat-", "sk-", "xox", "xapp-", "aiza", "eyj")
SECRET_HINTS = tuple(sorted({word.lower() for word in (*SECRET_WORDS, *SECRET_JOINED)} | set(SHAPE_HINTS)))


@cache
def _hints() -> Any:
    import ahocorasick  # one pass over the text for every hint at once

    automaton = ahocorasick.Automaton()
    for hint in SECRET_HINTS:
        automaton.add_word(hint, hint)
    automaton.make_automaton()
    return automaton


def could_hide_a_secret(text: str) -> bool:
    return next(_hints().iter(text.lower()), None) is not None or LONG_RUN.search(text) is not None


def redact_text(text: str) -> str:
    """Free text with every secret-looking part replaced by <redacted>."""
    if not text or not could_hide_a_secret(text):
        return text
    return redact_everything(text)


def redact_everything(text: str) -> str:
    """redact_text without its screen: every rule tried on the text."""
    text = PRIVATE_KEY.sub(REDACTED, text)
    text = URL_CREDENTIALS.sub(lambda m: f"{m['scheme']}{REDACTED}@", text)
    text = SLACK_WEBHOOK.sub(lambda m: m["keep"] + REDACTED, text)
    text = AUTHORIZATION.sub(lambda m: m["keep"] + REDACTED, text)
    text = BEARER.sub(lambda m: m["keep"] + REDACTED, text)
    text = TOKEN_SHAPES.sub(REDACTED, text)
    for pattern in (ARGUMENT, ASSIGNMENT, QUOTED, COLON):
        text = pattern.sub(_named_value, text)
    if not LONG_RUN.search(text):  # nothing long enough to be a random key: most strings stop here
        return text
    tokens = set(TOKEN_SPLIT.split(text)) | {m.group(0) for m in BASE64_TOKEN.finditer(text)}
    for token in sorted(tokens, key=len, reverse=True):
        if _random_looking(token):
            text = text.replace(token, REDACTED)
    return text


def redact_json(value: Any) -> Any:
    """A JSON-able value with redact_text applied to every string in it (keys are names, kept); anything
    that is not JSON (a path, an object) becomes its redacted str()."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, dict):
        return {k: redact_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_json(v) for v in value]
    return redact_text(str(value))


def _named_value(match: re.Match[str]) -> str:
    name = match["name"]
    if match["value"] == REDACTED or name.upper() in PROSE_NAMES or not secret_name(name):
        return match.group(0)
    return match["keep"] + REDACTED


def _entropy(token: str) -> float:
    counts = Counter(token)
    return -sum(n / len(token) * math.log2(n / len(token)) for n in counts.values())


def _random_looking(token: str) -> bool:
    """A long token that is hex or mixes cases and digits with high entropy: an API key, not a word or a path."""
    if len(token) < 32 or UUID.fullmatch(token) or HOST_LIKE.fullmatch(token):
        return False
    if re.fullmatch(r"[0-9a-fA-F]+", token):
        return True
    classes = sum(bool(re.search(p, token)) for p in (r"[a-z]", r"[A-Z]", r"[0-9]"))
    return classes == 3 and _entropy(token) >= 4.0
