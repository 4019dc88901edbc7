"""Alert subcommands: `xpuwatch rules generate [--check]` writes (or verifies) alerts/generated/ from the spec
(and reads.yaml: the catalog families each rule reads, exporter.readers); `xpuwatch rules test-page` sends a
test alert of each category through the configured path and prints each hop's answer (alerts/testpage.py)."""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from xpuwatch.alerts import testpage
from xpuwatch.alerts.alertmanager import (
    Endpoints,
    build_fragment,
    merge_fragment,
    render_alertmanager,
    render_fragment,
)
from xpuwatch.alerts.alertmanagerconfig import render_alertmanagerconfig
from xpuwatch.alerts.rules import dump_yaml, render_prometheusrule, render_rules
from xpuwatch.alerts.spec import (
    DEFAULT_SPEC_PATH,
    Spec,
    SpecError,
    load_user_spec,
    matches,
    parse_matchers,
)
from xpuwatch.exporter import readers, validation
from xpuwatch.exporter.logs import config_error
from xpuwatch.vendors.untrusted import replace_file

# Relative to the current directory (the repository root): an installed package never writes into
# site-packages, and a checkout's own spec.yaml is the one edited.
DEFAULT_OUT = Path("alerts/generated")
DEFAULT_KUSTOMIZE = Path("deploy/kustomize")
# Copies kustomize reads (it reads only its own tree): the rules of the PrometheusRule every overlay applies and
# the AlertmanagerConfig of overlays/kube-prometheus-stack, so a site spec reaches the cluster.
KUSTOMIZE_COPIES = {
    "prometheusrule.yaml": Path("base/prometheusrule.yaml"),
    "alertmanagerconfig.yaml": Path("components/alertmanagerconfig/alertmanagerconfig.yaml"),
}
LOCAL_SPEC = Path("alerts/spec.yaml")
_DEFAULTS = Endpoints()


def render_all(spec_path: Path, endpoints: Endpoints) -> dict[str, str]:
    """File name -> content of every generated file for ``spec_path`` laid over the packaged defaults (a
    user spec may hold any subset of their keys). Raises SpecError / OSError on a bad spec."""
    spec = load_user_spec(spec_path)
    rules = render_rules(spec)
    return {
        "rules.yml": rules,
        "reads.yaml": readers.dump(readers.rule_readers(yaml.safe_load(rules)), "rules generate", "rule"),
        "prometheusrule.yaml": render_prometheusrule(spec),
        "alertmanager.yml": render_alertmanager(spec, endpoints),
        "alertmanager-fragment.yml": render_fragment(spec, endpoints),
        "alertmanagerconfig.yaml": render_alertmanagerconfig(spec, endpoints),
    }


def scrape_config_problem(spec: Spec, doc: Any, source: str) -> str | None:
    """None when a job of the Prometheus scrape config ``doc`` (decoded prometheus.yml) satisfies every
    ``job`` matcher of ``exporter_job_selector`` (or the selector names no job), else the complaint naming
    the jobs there. Only ``scrape_configs[].job_name`` is read: jobs from ``scrape_config_files`` or a
    ServiceMonitor (prometheus-operator names the job after the Service or its ``jobLabel``) are not seen."""
    if not isinstance(doc, dict) or not isinstance(doc.get("scrape_configs"), list):
        return f"--scrape-config {source}: no scrape_configs list"
    jobs = [str(sc["job_name"]) for sc in doc["scrape_configs"] if isinstance(sc, dict) and "job_name" in sc]
    on_job = [m for m in parse_matchers(spec.exporter_job_selector) if m[0] == "job"]
    if not on_job or any(all(matches(m, job) for m in on_job) for job in jobs):
        return None
    return (
        f"exporter_job_selector {spec.exporter_job_selector} matches no scrape job of {source} "
        f"({', '.join(jobs) or 'none'}): no exporter alert would fire; set exporter_job_selector in your site "
        'spec to the exporter\'s job, e.g. job="<its job_name>"'
    )


def promtool_problem(rules_yml: str, promtool: str | None = None) -> str | None:
    """``promtool check rules`` on the generated rules file when promtool is on PATH (or given): None
    when it passes or promtool is absent, else its complaint as one line. The spec parser already checks
    selectors, regexes and numbers; promtool is the oracle for what it cannot foresee."""
    promtool = promtool or shutil.which("promtool")
    if not promtool:
        return None
    with tempfile.TemporaryDirectory(prefix="xpuwatch-rules-") as tmp:
        path = Path(tmp) / "rules.yml"
        path.write_text(rules_yml, encoding="utf-8")
        try:
            res = subprocess.run(
                [promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"promtool check rules could not run: {exc}"
    if res.returncode == 0:
        return None
    lines = [ln.strip().removeprefix("FAILED:").strip() for ln in (res.stderr + res.stdout).splitlines()]
    errors = [ln for ln in lines if ln and not ln.startswith("Checking ")]
    return "promtool check rules failed on the generated rules: " + "; ".join(errors).replace(
        str(path), "rules.yml"
    )


def stale_files(out: Path, files: dict[str, str]) -> list[str]:
    """Names under ``out`` whose content differs from ``files`` (missing counts as stale)."""
    stale = []
    for name, text in files.items():
        path = out / name
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            stale.append(name)
    return stale


def add_commands(sub: Any) -> None:
    rules = sub.add_parser("rules", help="alert rules and Alertmanager config")
    rules_sub = rules.add_subparsers(dest="rules_command", metavar="SUBCOMMAND")
    gen = rules_sub.add_parser(
        "generate",
        help="write alerts/generated/{rules.yml,prometheusrule.yaml,alertmanager.yml,alertmanager-fragment.yml,"
        "alertmanagerconfig.yaml} from the spec, and reads.yaml (the catalog families each rule reads)",
    )
    gen.add_argument(
        "--spec",
        type=Path,
        default=LOCAL_SPEC if LOCAL_SPEC.is_file() else DEFAULT_SPEC_PATH,
        help="spec file laid over the defaults: a complete spec or any subset of its keys, e.g. one "
        "threshold (default: alerts/spec.yaml here, else the packaged one)",
    )
    gen.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder (default: %(default)s)")
    gen.add_argument(
        "--kustomize",
        type=Path,
        default=None,
        help="also write the PrometheusRule and AlertmanagerConfig copies the Kustomize tree applies "
        f"(base/prometheusrule.yaml, components/alertmanagerconfig/) under this folder (default: {DEFAULT_KUSTOMIZE} "
        "when it exists and --out is the default, else none)",
    )
    gen.add_argument("--check", action="store_true", help="write nothing; exit 1 if any output is stale")
    gen.add_argument("--relay-url", default=_DEFAULTS.relay_url, help="relay base URL (default: %(default)s)")
    gen.add_argument(
        "--remediator-url",
        default=_DEFAULTS.remediator_url,
        help="remediation controller base URL (default: %(default)s)",
    )
    gen.add_argument(
        "--relay-credentials-file",
        default=_DEFAULTS.relay_credentials_file,
        help="file with the relay's bearer token, as Alertmanager sees it (default: %(default)s)",
    )
    gen.add_argument(
        "--remediator-credentials-file",
        default=_DEFAULTS.remediator_credentials_file,
        help="file with the remediation controller's bearer token (default: %(default)s)",
    )
    gen.add_argument(
        "--meta-url",
        default=_DEFAULTS.meta_url,
        help="out-of-band webhook for the paging path's own alerts (category meta), not through the relay: "
        "without it a dead relay is told to nobody (default: none)",
    )
    gen.add_argument(
        "--meta-credentials-file",
        default=_DEFAULTS.meta_credentials_file,
        help="file with the bearer token for --meta-url (default: none)",
    )
    gen.add_argument(
        "--merge-into",
        type=Path,
        default=None,
        help="an existing alertmanager.yml: also write <out>/alertmanager-merged.yml, that file with "
        "alertmanager-fragment.yml added (xpuwatch's subtree first, its receivers and inhibit rules appended)",
    )
    gen.add_argument(
        "--scrape-config",
        type=Path,
        default=None,
        help="a Prometheus config (prometheus.yml): fail unless one of its scrape jobs matches the spec's "
        "exporter_job_selector (default: no check)",
    )
    gen.set_defaults(func=_generate)
    page = rules_sub.add_parser(
        "test-page",
        help="send a test alert of each category (hardware, performance, meta) through Alertmanager if given, "
        "else straight to the relay, and print what each hop answered (status, channel, bot answer)",
    )
    page.add_argument(
        "--spec",
        type=Path,
        default=LOCAL_SPEC if LOCAL_SPEC.is_file() else DEFAULT_SPEC_PATH,
        help="the site spec the config was generated from: its receivers are the relay channels "
        "(default: alerts/spec.yaml here, else the packaged one)",
    )
    page.add_argument(
        "--alertmanager-url",
        default="",
        help="Alertmanager base URL (e.g. http://alertmanager:9093): the page takes your routing tree and "
        "inhibitions (default: none, straight to the relay)",
    )
    page.add_argument(
        "--relay-url",
        default="",
        help="relay base URL: where the page goes without --alertmanager-url, and where the bots' answers are "
        "read (default: none; with --alertmanager-url the bots' answers are then not shown)",
    )
    page.add_argument(
        "--relay-credentials-file",
        default="",
        help="file with the relay's bearer token (its auth.bearer_token_file; default: none)",
    )
    page.add_argument(
        "--timeout",
        type=float,
        default=0.0,
        help="seconds to wait for the bots' answers (default: the longest group_wait of the routes + 60)",
    )
    page.set_defaults(func=_test_page)
    rules.set_defaults(func=lambda args: (rules.print_help(), 2)[1])


def _test_page(args: argparse.Namespace) -> int:
    try:
        spec = load_user_spec(args.spec)
        for flag in ("alertmanager_url", "relay_url"):
            value = getattr(args, flag)
            if value:
                validation.http_url(value, "--" + flag.replace("_", "-"), SpecError)
        if not args.alertmanager_url and not args.relay_url:
            raise SpecError("give --alertmanager-url, --relay-url or both")
        token = ""
        if args.relay_credentials_file:
            token = validation.secret_text(
                Path(args.relay_credentials_file), "--relay-credentials-file", SpecError
            )
        if args.timeout < 0:
            raise SpecError("--timeout: must be at least 0")
    except OSError as exc:
        return config_error(f"cannot read {exc.filename}: {exc.strerror or exc}")
    except SpecError as exc:
        return config_error(" ".join(str(exc).split()))
    target = testpage.Target(args.alertmanager_url, args.relay_url, token, args.timeout)
    page_id = testpage.new_page_id()
    via = f"Alertmanager {args.alertmanager_url}" if args.alertmanager_url else f"the relay {args.relay_url}"
    print(f"test page {page_id} through {via}", flush=True)
    answers = asyncio.run(testpage.run(spec, target, page_id, lambda a: print(a.line(), flush=True)))
    return 0 if all(a.ok is not False for a in answers) and answers else 1


def _generate(args: argparse.Namespace) -> int:
    try:
        endpoints = Endpoints(
            relay_url=validation.http_url(args.relay_url, "--relay-url", SpecError),
            remediator_url=validation.http_url(args.remediator_url, "--remediator-url", SpecError),
            relay_credentials_file=args.relay_credentials_file,
            remediator_credentials_file=args.remediator_credentials_file,
            meta_url=args.meta_url and validation.http_url(args.meta_url, "--meta-url", SpecError),
            meta_credentials_file=args.meta_credentials_file,
        )
        files = render_all(args.spec, endpoints)
        problem = promtool_problem(files["rules.yml"])
        if problem:
            raise SpecError(f"{args.spec}: {problem}")
        if args.scrape_config is not None:
            scrape = validation.yaml_file(args.scrape_config, "--scrape-config", SpecError, foreign=True)
            problem = scrape_config_problem(load_user_spec(args.spec), scrape, str(args.scrape_config))
            if problem:
                raise SpecError(problem)
        if args.merge_into is not None:
            existing = validation.yaml_file(args.merge_into, "--merge-into", SpecError, foreign=True)
            if not isinstance(existing, dict):
                raise SpecError(f"--merge-into {args.merge_into}: not an Alertmanager config (a mapping)")
            try:
                merged = merge_fragment(existing, build_fragment(load_user_spec(args.spec), endpoints))
            except ValueError as exc:
                raise SpecError(f"--merge-into {args.merge_into}: {exc}") from None
            files = {**files, "alertmanager-merged.yml": dump_yaml(merged)}
    except OSError as exc:  # an unreadable --spec: say which file and why, not "[Errno 2] ..."
        return config_error(f"--spec: cannot read {exc.filename or args.spec}: {exc.strerror or exc}")
    except (SpecError, ValueError, KeyError) as exc:
        return config_error(" ".join(str(exc).split()))
    outputs = {args.out / name: text for name, text in files.items()}
    kustomize: Path | None = args.kustomize
    if kustomize is None and args.out == DEFAULT_OUT and DEFAULT_KUSTOMIZE.is_dir():
        kustomize = DEFAULT_KUSTOMIZE  # the checkout's own tree; --out elsewhere leaves it alone
    if kustomize is not None:
        outputs.update({kustomize / rel: files[name] for name, rel in KUSTOMIZE_COPIES.items()})
    if args.check:
        stale = [path for path, text in outputs.items() if stale_files(path.parent, {path.name: text})]
        for path in stale:
            print(f"stale: {path} (run `xpuwatch rules generate`)", file=sys.stderr)
        if not stale:
            print(f"{args.out}: {len(outputs)} files up to date")
        return 1 if stale else 0
    for path, text in outputs.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        replace_file(path, text)
        print(f"wrote {path}")
    return 0
