"""The launcher's own resolver options (launch/rendezvous/resolver.py): one attempt of a
second for the reverse lookup torch makes on every store connection, unless the user set
``RES_OPTIONS``; and only in the launcher's process (the workers' environment is the one
captured before, as the launch tests check)."""

from __future__ import annotations

from slurm_ft.launch.rendezvous import resolver


def test_one_attempt_of_a_second_where_the_user_set_none() -> None:
    env: dict[str, str] = {"PATH": "/bin"}
    resolver.bound_reverse_lookups(env)
    assert env == {"PATH": "/bin", "RES_OPTIONS": "timeout:1 attempts:1"}


def test_the_users_own_options_stay() -> None:
    env = {"RES_OPTIONS": "timeout:5 attempts:2 rotate"}
    resolver.bound_reverse_lookups(env)
    assert env == {"RES_OPTIONS": "timeout:5 attempts:2 rotate"}
