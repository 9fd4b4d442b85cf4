"""Credentials masked out of a log line that phasewatch quotes (a crash verdict's telling line), so no
reader of a verdict (the journal, Alertmanager, hooks, `/status`) gets a password with it.

Masked, each value as `***`: the password of URL userinfo (`https://alice:***@host`; a userinfo
without a password, often a token, wholly: `https://***@host`); the value of a credential key in
`key=value`, `key: value`, `"key": "value"`, URL query and `--key value` form (the keys are whole
words: `token` but not `#token`, `max_tokens`, `--tokenizer-path` or `new-token`); the value of an
`Authorization:` header and of a `Bearer` token; a Hugging Face token (`hf_` then at least 10 letters
and digits, not all lower case) wherever it stands. Every pattern is linear in the text.
"""

from __future__ import annotations

import re

MASK = "***"
WINDOW = 4096  # a quote is cut far shorter; a secret starting past this is not shown anyway

_VALUE = r"""(?P<value>"[^"\n]*"|'[^'\n]*'|[^\s"'`,;&()[\]{}<>][^\s"'`,;&)\]}<>]*)"""
_KEYS = (r"token|key|api[_-]?key|x[_-]api[_-]key|password|passwd|secret|secret[_-]key|client[_-]secret"
         r"|access[_-]token|auth[_-]token|refresh[_-]token|id[_-]token|session[_-]token|hf[_-]token"
         r"|private[_-]key|access[_-]key|aws[_-]secret[_-]access[_-]key|x-amz-signature|x-amz-security-token")
# An environment variable's name ending in a credential word (`HF_TOKEN`, `OPENAI_API_KEY`): upper case only.
_ENV_KEYS = r"[A-Z][A-Z0-9_]*_(?:TOKEN|API_KEY|KEY|SECRET|PASSWORD|PASSWD)"
# Not after a word character, `#`, `-` or `.` (`#token: 48213`, `#new-token: 6`, `cfg.key`), except
# after the `--` of an option (`--api-key=...`).
_KEY_START = r"(?:(?<![\w#.-])|(?<=--))"

_URL_USERINFO_RE = re.compile(r"(?<![\w+.-])(?P<scheme>[A-Za-z][\w+.-]*://)(?P<info>[^\s/?#@]+(?:@[^\s/?#@]+)*)@")
_PAIR_RE = re.compile(rf"{_KEY_START}(?P<key>(?i:{_KEYS})|{_ENV_KEYS})(?P<quote>[\"']?)"
                      rf"(?P<sep>[ \t]*[:=][ \t]*){_VALUE}")
_OPTION_RE = re.compile(rf"(?<=--)(?P<key>(?i:{_KEYS}))(?P<sep>[ \t]+)(?!-){_VALUE}")
_AUTHORIZATION_RE = re.compile(
    r"(?i:(?<![\w-])(?P<key>(?:proxy-)?authorization)(?P<quote>[\"']?)(?P<sep>[ \t]*[:=][ \t]*[\"']?))"
    r"(?:(?P<scheme>(?i:bearer|basic|token|digest|negotiate))[ \t]+)?(?P<value>[^\s\"',;]+)")
_BEARER_RE = re.compile(r"(?<![\w-])(?P<scheme>(?i:bearer))[ \t]+(?P<value>[A-Za-z0-9._~+/-]{8,}=*)")
_HF_TOKEN_RE = re.compile(r"(?<![A-Za-z0-9])hf_(?=[A-Za-z0-9]*[A-Z0-9])[A-Za-z0-9]{10,}(?![A-Za-z0-9_])")


def _userinfo(match: re.Match[str]) -> str:
    user, colon, _ = match["info"].partition(":")
    return f"{match['scheme']}{user}:{MASK}@" if colon else f"{match['scheme']}{MASK}@"


def _masked_value(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return f"{value[0]}{MASK}{value[0]}"
    return MASK


def _pair(match: re.Match[str]) -> str:
    if match["key"].lower() == "key" and not match["quote"] and match["sep"] != "=":
        return match[0]  # `Missing key: model.layers.0`, `key = ...` (a quoted source line): not a secret
    return f"{match['key']}{match['quote']}{match['sep']}{_masked_value(match['value'])}"


def _option(match: re.Match[str]) -> str:
    return f"{match['key']}{match['sep']}{_masked_value(match['value'])}"


def _authorization(match: re.Match[str]) -> str:
    scheme = f"{match['scheme']} " if match["scheme"] else ""
    return f"{match['key']}{match['quote']}{match['sep']}{scheme}{MASK}"


def redact(text: str) -> str:
    """`text` (its first WINDOW characters) with every credential it shows replaced by `***`;
    a line without one is returned as it is."""
    text = text[:WINDOW]
    text = _URL_USERINFO_RE.sub(_userinfo, text)
    text = _AUTHORIZATION_RE.sub(_authorization, text)
    text = _BEARER_RE.sub(lambda m: f"{m['scheme']} {MASK}", text)
    text = _PAIR_RE.sub(_pair, text)
    text = _OPTION_RE.sub(_option, text)
    return _HF_TOKEN_RE.sub(f"hf_{MASK}", text)
