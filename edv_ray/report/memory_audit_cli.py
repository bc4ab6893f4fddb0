"""``edv audit`` and ``edv audit-import``: the memory audit on the command line.

The parsers are added on every ``edv`` start, so this module imports only what they need;
the audit itself (the model-call path, litellm) loads when a command runs."""

from __future__ import annotations

import os
from pathlib import Path

from rich.markup import escape

from edv_ray.config_files import ConfigError
from edv_ray.config_files import credential_kind, env_name_problem
from edv_ray.report.memory_audit_key import DEFAULT_DOMAIN


def add_parsers(sub) -> None:
    """``edv audit`` and ``edv audit-import`` on the CLI's subparsers."""
    a = sub.add_parser("audit", help="LLM rubric over a sample of a run's memory items")
    a.add_argument("run_dir")
    a.add_argument("--model-endpoint", required=True, help="OpenAI-compatible base URL (…/v1)")
    a.add_argument("--model", required=True, help="model name the endpoint serves")
    a.add_argument("--api-key-env", help="environment variable holding the endpoint's key")
    a.add_argument("--sample", type=int, default=20, help="items per method (default 20)")
    a.add_argument("--seed", type=int, default=0, help="the sample and its shuffled order")
    a.add_argument("--domain", default=DEFAULT_DOMAIN,
                   help=f"audit this domain's items only (default {DEFAULT_DOMAIN}, the paper's "
                        "audit domain; 'all': every domain)")
    a.add_argument("--retries", type=int, default=2, help="re-asks on a malformed answer")
    a.add_argument("--json-mode", default="schema", choices=["schema", "json_object", "none"])
    i = sub.add_parser("audit-import", help="import a filled human rating sheet (CSV)")
    i.add_argument("run_dir")
    i.add_argument("csv")
    i.add_argument("--rater", help="who rated (required unless the sheet has a rater column); "
                   "each rater's scores are kept apart, re-importing a rater replaces theirs")


AUDIT_NOTHING_SCORED = 4  # like `edv run`'s "episodes ended as infrastructure errors"


def _judge_problem(args) -> str | None:
    """Why the judge cannot be asked (None: it can), checked before any item is sampled,
    like `edv run` checks its endpoints: no key in the URL, a variable's NAME in
    --api-key-env (never echoed), that variable set, the endpoint answering with the key."""
    from edv_ray.config import ModelConfig
    from edv_ray.runtime.servers import check_endpoint

    kind = credential_kind(args.model_endpoint)
    if kind:  # it would be printed and stored: keys go in --api-key-env's variable
        return (f"--model-endpoint holds {kind}; put the key in an environment variable and "
                "name it with --api-key-env")
    if args.api_key_env is not None:
        problem = env_name_problem(args.api_key_env)
        if problem:
            return f"--api-key-env {problem}"
        if args.api_key_env not in os.environ:
            return f"--api-key-env: environment variable {args.api_key_env} is not set"
    try:
        mc = ModelConfig(engine="endpoint", litellm_model=f"openai/{args.model}",
                         api_base=args.model_endpoint, api_key_env=args.api_key_env)
        check_endpoint(args.model, mc)
    except ConfigError as err:
        return str(err).replace(f"model {args.model!r}: ", "the judge: ", 1)
    except ValueError:
        return "--model-endpoint must be an http(s) URL of an OpenAI-compatible API (…/v1)"
    return None


def run_cli(args, console) -> int:
    """Handle ``audit`` / ``audit-import`` (parsed by :func:`add_parsers`); exit code."""
    from edv_ray.llm.endpoints import Endpoint
    from edv_ray.report.memory_audit import audit_dir, audit_run, print_summary, summarize
    from edv_ray.report.memory_audit_human import HumanScoreError, import_human_scores, raters_of
    from edv_ray.report.memory_audit_key import key_path
    from edv_ray.results.parquet_io import read_rows

    run_dir = Path(args.run_dir)
    if args.cmd == "audit":
        problem = _judge_problem(args)
        if problem:
            console.print(f"[red]error:[/] {escape(problem)}", soft_wrap=True)
            return 2
        endpoint = Endpoint(model_name=args.model, litellm_model=f"openai/{args.model}",
                            api_base=args.model_endpoint, api_key_env=args.api_key_env)
        try:
            table = audit_run(run_dir, endpoint, args.sample, args.seed, retries=args.retries,
                              json_mode=args.json_mode,
                              domain=None if args.domain == "all" else args.domain)
        except ValueError as err:  # nothing to audit
            console.print(f"[red]error:[/] {escape(str(err))}", soft_wrap=True)
            return 2
        print_summary(table, console)
        scores = audit_dir(run_dir) / "memory_audit.parquet"
        console.print(f"scores: {escape(str(scores))}\nrating sheet for people (blind): "
                      f"{escape(str(audit_dir(run_dir) / 'human_rating_sheet.csv'))}\n"
                      f"key (keep it from raters): {escape(str(key_path(run_dir)))}")
        rows = read_rows(scores)
        if not any(r["parse_ok"] for r in rows):  # the judge answered nothing usable
            console.print(f"[red]error:[/] no item was scored ({len(rows)} item(s) tried, every "
                          "one without a valid answer: see the error column of "
                          f"{escape(str(scores))})", soft_wrap=True)
            return AUDIT_NOTHING_SCORED
        return 0
    try:
        n = import_human_scores(run_dir, args.csv, args.rater)
    except HumanScoreError as err:
        console.print(f"[red]error:[/] {escape(str(err))}", soft_wrap=True)  # one line
        return 2
    console.print(f"imported {n} rated item(s) into "
                  f"{escape(str(audit_dir(run_dir) / 'human_scores.parquet'))}"
                  f" (raters: {escape(', '.join(raters_of(run_dir)))})")
    print_summary(summarize(run_dir), console)
    return 0
