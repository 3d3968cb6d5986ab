"""What a config needs from the environment it starts in, checked at start-up (and by ``check-config``):
every credential variable and key file it names holds a usable key, and someone can present a key.
A team key given by variable (``{id, env}``) is read and hashed here, once, never kept in plain text.

What the file alone shows (shapes, values, names) is ``gateway.runtime.config``'s; how a running
upstream re-reads its key is ``gateway.runtime.secrets``'s.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from gateway.runtime.config import ConfigError, GatewayConfig, Team, hash_key
from gateway.runtime.keyfile import KeyProblem, read_key_file, usable_key


def key_hashes(team: Team, env: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    """(key id, sha256) for each key of a team; ``env`` keys are read and hashed here, once."""
    environ = os.environ if env is None else env
    out = []
    for key in team.keys:
        if key.sha256 is not None:
            out.append((key.id, key.sha256))
            continue
        assert key.env is not None
        secret = environ.get(key.env)
        if not secret:
            raise ConfigError(f"teams[{team.id!r}].keys[{key.id!r}].env: {_unset(key.env, environ)}")
        out.append((key.id, hash_key(secret)))
    return out


def _unset(var: str, environ: Mapping[str, str]) -> str:
    return f"environment variable {var} is {'empty' if var in environ else 'not set'}"


def check_environment(config: GatewayConfig, source: str = "<config>", env: Mapping[str, str] | None = None) -> None:
    """At start-up (and in ``check-config``): every credential variable the config names is set, and
    someone can present a key. Unchecked, an unset ``api_key_env`` would surface as a 502 on the first
    request, and a keyless config as a 401 to everyone."""
    environ = os.environ if env is None else env
    _check_variables(config, source, environ)
    _check_key_files(config, source)
    try:
        keyed = [team.id for team in config.teams if key_hashes(team, environ)]
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    if config.auth == "none" or keyed:
        return
    _someone_can_hold_a_key(config, source, environ)


def _check_variables(config: GatewayConfig, source: str, environ: Mapping[str, str]) -> None:
    named = [
        (f"models[{m.name!r}].targets[{i}].api_key_env", t.api_key_env)
        for m in config.models
        for i, t in enumerate(m.targets)
    ]
    named += [(f"vendors.{prefix}.api_key_env", v.api_key_env) for prefix, v in config.vendors.items()]
    for where, var in named:
        if var is not None and not environ.get(var):
            raise ConfigError(f"{source}: {where}: {_unset(var, environ)}")
        try:
            usable_key(environ.get(var or "", "").encode("utf-8", "surrogateescape"))
        except KeyProblem as exc:
            raise ConfigError(f"{source}: {where}: ${var} is not a usable key: {exc}") from None


def _check_key_files(config: GatewayConfig, source: str) -> None:
    for m in config.models:
        for i, t in enumerate(m.targets):
            if t.api_key_file is not None:
                where = f"{source}: models[{m.name!r}].targets[{i}].api_key_file"
                try:
                    empty = read_key_file(t.api_key_file) is None
                except OSError as exc:
                    raise ConfigError(f"{where}: cannot read: {exc.strerror}") from None
                except KeyProblem as exc:
                    raise ConfigError(f"{where}: not a usable key: {exc}") from None
                if empty:
                    raise ConfigError(f"{where}: the file is empty")


def _someone_can_hold_a_key(config: GatewayConfig, source: str, environ: Mapping[str, str]) -> None:
    """With keys required and none in the config: an admin key to issue them (the chart checks the
    same at render time, knowing which Secret gives the admin key)."""
    fix = "add keys to a team ({id, sha256} or {id, env}), or set auth: none for open access"
    if not config.teams:
        raise ConfigError(f"{source}: teams: none given, and auth: keys (the default) needs one with a key: {fix}")
    admin_var = config.admin.key_env or "LLM_GATEWAY_ADMIN_KEY"
    if not (config.admin.key_sha256 or environ.get(admin_var)):
        # With an admin key, keys can be issued at run time (``llm-gateway keys create``).
        raise ConfigError(
            f"{source}: teams: no team has a key and no admin key ({admin_var}) is set to issue one: {fix}"
        )
