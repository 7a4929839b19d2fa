"""Every role's README in the form Ansible users know (geerlingguy's roles), in step with the role's
``meta/argument_specs.yml`` and ``defaults/main.yml`` (issue 43).

A README is ``# <role>``, one paragraph, then the sections ``## Requirements``, ``## Role Variables``,
``## Dependencies`` and ``## Example Playbook`` in that order (further sections, such as
``## How it works``, come after them). Role Variables holds one table::

    | Variable | Default | Entry points | Description |
    |---|---|---|---|
    | `vllm_server_port` | `8000` | launch | Port the server listens on. |

- Variable: the name in backticks; one row per variable of the argument specs, all entry points.
- Default: a YAML/JSON literal in backticks (`` `8000` ``, `` `"sparkbench-vllm"` ``, `` `[]` ``,
  `` `false` ``, `` `null` ``), or ``(required)`` for a required option. A default that is a Jinja
  expression is the string written in defaults/main.yml, as a quoted literal, with each ``|``
  written ``\\|`` (a table cell); a multi-line expression may be written on one line (whitespace
  is compared collapsed).
- Entry points: the argument specs' entry points that take the variable (``main``, ``launch``, ...),
  separated by commas.

Checked, for every role under roles/: the README's form, every option of every entry point in the
table with the same default (compared as parsed YAML values), every row an option of the specs,
every defaults/main.yml key an option with an equal default (a Jinja default stays out of the spec:
Ansible templates a spec's defaults when it validates a role's arguments, before the variables
they read exist; the README shows it) (and the reverse: a spec default that
defaults/main.yml lacks would be documentation only, since Ansible never sets a role variable
from it), a description on every option, and an Example Playbook whose YAML parses and names the
role. Reads files only (no subprocess, server or Docker).
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parent.parent
ROLES_DIR = REPO / "roles"
ROLES = sorted(p.name for p in ROLES_DIR.iterdir() if p.is_dir() and not p.name.startswith("."))
SECTIONS = ["Requirements", "Role Variables", "Dependencies", "Example Playbook"]
COLUMNS = ["Variable", "Default", "Entry points", "Description"]
REQUIRED = "(required)"
MISSING = object()

# ---- reading the files ----------------------------------------------------------------------


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def spec_options(role: str) -> dict[str, dict[str, dict]]:
    """entry point → {option: its spec} from meta/argument_specs.yml."""
    specs = (load_yaml(ROLES_DIR / role / "meta" / "argument_specs.yml") or {}).get("argument_specs") or {}
    return {entry: dict((spec or {}).get("options") or {}) for entry, spec in specs.items()}


def role_defaults(role: str) -> dict[str, Any]:
    path = ROLES_DIR / role / "defaults" / "main.yml"
    return (load_yaml(path) or {}) if path.exists() else {}


def by_option(options: dict[str, dict[str, dict]]) -> dict[str, list[tuple[str, dict]]]:
    """option → [(entry point, its spec there)], entry points in file order."""
    out: dict[str, list[tuple[str, dict]]] = {}
    for entry, opts in options.items():
        for name, spec in opts.items():
            out.setdefault(name, []).append((entry, spec or {}))
    return out


def headings(text: str) -> list[tuple[int, str, int]]:
    """(level, title, line index) of the Markdown headings outside fenced code blocks."""
    out, fence = [], None
    for i, line in enumerate(text.splitlines()):
        m = re.match(r"^\s*(`{3,}|~{3,})", line)
        if m:
            mark = m.group(1)[0] * 3
            fence = None if fence == mark else (fence or mark)
            continue
        h = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if fence is None and h:
            out.append((len(h.group(1)), h.group(2).strip(), i))
    return out


def sections(text: str) -> tuple[str, str, dict[str, str], list[str]]:
    """(H1 title, the text before the first H2, {H2 title: its body}, H2 titles in order)."""
    lines = text.splitlines()
    heads = headings(text)
    h1 = [(t, i) for lvl, t, i in heads if lvl == 1]
    h2 = [(t, i) for lvl, t, i in heads if lvl == 2]
    title, start = h1[0] if h1 else ("", -1)
    first_h2 = h2[0][1] if h2 else len(lines)
    intro = "\n".join(lines[start + 1:first_h2]).strip()
    bodies = {}
    for k, (t, i) in enumerate(h2):
        end = h2[k + 1][1] if k + 1 < len(h2) else len(lines)
        bodies[t] = "\n".join(lines[i + 1:end])
    return title, intro, bodies, [t for t, _ in h2]


def split_row(line: str) -> list[str]:
    """The cells of a Markdown table row; ``\\|`` is a literal ``|`` inside a cell."""
    body = line.strip()
    body = body[1:] if body.startswith("|") else body
    body = body[:-1] if body.endswith("|") and not body.endswith("\\|") else body
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", body)]


def code_span(cell: str) -> str | None:
    m = re.fullmatch(r"(`+)\s?(.*?)\s?\1", cell.strip())
    return m.group(2) if m else None


def variables_table(body: str) -> tuple[dict[str, dict], list[str]]:
    """The Role Variables table: {variable: {default, default_text, entry_points, description}}, and
    the problems found while reading it."""
    problems: list[str] = []
    rows = [line for line in body.splitlines() if line.strip().startswith("|")]
    if len(rows) < 2:
        return {}, ["no table `| Variable | Default | Entry points | Description |` in ## Role Variables"]
    header = split_row(rows[0])
    if header != COLUMNS:
        return {}, [f"the table's header is {header}; expected | {' | '.join(COLUMNS)} |"]
    table: dict[str, dict] = {}
    for line in rows[2:]:
        cells = split_row(line)
        if len(cells) != len(COLUMNS):
            problems.append(f"row with {len(cells)} cells, not {len(COLUMNS)} "
                            f"(a `|` inside a cell is written \\|): {line}")
            continue
        var_cell, default_cell, entry_cell, description = cells
        name = code_span(var_cell)
        if not name or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            problems.append(f"variable cell {var_cell!r} is not a name in backticks")
            continue
        if name in table:
            problems.append(f"`{name}` has two rows")
        if default_cell == REQUIRED:
            default, default_text = MISSING, REQUIRED
        else:
            literal = code_span(default_cell)
            if literal is None:
                problems.append(f"`{name}`: default {default_cell!r} is neither a literal in backticks nor {REQUIRED}")
                continue
            try:
                default = yaml.safe_load(literal)
            except yaml.YAMLError as exc:
                problems.append(f"`{name}`: default `{literal}` is not a YAML literal ({exc.__class__.__name__})")
                continue
            default_text = literal
        entries = [e.strip().strip("`") for e in entry_cell.split(",") if e.strip()]
        table[name] = {"default": default, "default_text": default_text, "entry_points": entries,
                       "description": description}
    return table, problems


def yaml_blocks(body: str) -> list[str]:
    return re.findall(r"^```ya?ml[ \t]*\n(.*?)^```[ \t]*$", body, flags=re.M | re.S)


# ---- comparing values -----------------------------------------------------------------------


def same(a: Any, b: Any, *, loose_space: bool = False) -> bool:
    """Equal as YAML values: a bool is never equal to a number; strings compared with whitespace
    collapsed when ``loose_space`` (a multi-line Jinja default written on one line)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, str) and isinstance(b, str):
        return " ".join(a.split()) == " ".join(b.split()) if loose_space else a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k], loose_space=loose_space) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y, loose_space=loose_space) for x, y in zip(a, b))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    return type(a) is type(b) and a == b


def show(value: Any) -> str:
    """A value as the README writes it: a JSON literal (valid YAML), or (required)."""
    if value is MISSING:
        return REQUIRED
    try:
        return json.dumps(value, ensure_ascii=False)
    except TypeError:
        return repr(value)


# ---- the checks (each returns its problems, so failures name the variable and the file) -----


def form_problems(role: str, text: str) -> list[str]:
    readme = f"roles/{role}/README.md"
    title, intro, _, order = sections(text)
    problems = []
    if title != role:
        problems.append(f"{readme}: the first heading is {title!r}; write `# {role}`")
    if not intro:
        problems.append(f"{readme}: write a one-paragraph description between `# {role}` and `## {SECTIONS[0]}`")
    elif re.search(r"\n\s*\n", intro):
        problems.append(f"{readme}: the description before `## {SECTIONS[0]}` is more than one paragraph; "
                        "move the rest under a section")
    if order[:len(SECTIONS)] != SECTIONS:
        problems.append(f"{readme}: its sections begin {order[:len(SECTIONS)]}; the first four must be "
                        + ", ".join(f"`## {s}`" for s in SECTIONS) + " in this order")
    return problems


def spec_problems(role: str, options: dict[str, dict[str, dict]], defaults: dict[str, Any]) -> list[str]:
    spec_file, defaults_file = f"roles/{role}/meta/argument_specs.yml", f"roles/{role}/defaults/main.yml"
    problems = []
    for name, places in by_option(options).items():
        for entry, spec in places:
            if not spec.get("description"):
                problems.append(f"{spec_file}: `{name}` ({entry}) has no description")
            if spec.get("required") and "default" in spec:
                problems.append(f"{spec_file}: `{name}` ({entry}) is required and has a default; keep one")
            if spec.get("required") and name in defaults:
                problems.append(f"{spec_file}: `{name}` ({entry}) is required but {defaults_file} sets it; "
                                "drop `required` and give its default")
        first_entry, first = places[0]
        for entry, spec in places[1:]:
            if bool(spec.get("required")) != bool(first.get("required")) or not same(
                    spec.get("default", MISSING), first.get("default", MISSING)):
                problems.append(f"{spec_file}: `{name}` has another default or `required` in {entry} than in "
                                f"{first_entry}; make them the same")
        spec = first
        if name in defaults and is_template(defaults[name]):
            if "default" in spec:
                problems.append(f"{spec_file}: `{name}` carries the Jinja default of {defaults_file}; drop it "
                                "(Ansible templates a spec's defaults when it validates the role's arguments, "
                                "before the variables they read exist; the README shows the defaults' value)")
        elif name in defaults:
            if "default" not in spec:
                problems.append(f"{spec_file}: `{name}` has no default; add `default: {show(defaults[name])}` "
                                f"(as in {defaults_file})")
            elif not same(spec["default"], defaults[name]):
                problems.append(f"{spec_file}: `{name}` default {show(spec['default'])} differs from "
                                f"{defaults_file}'s {show(defaults[name])}; make them the same")
        elif "default" in spec and spec["default"] is not None:
            problems.append(f"{spec_file}: `{name}` has default {show(spec['default'])} but {defaults_file} does "
                            "not set it (Ansible does not apply spec defaults); add it there or drop it here")
        elif not spec.get("required") and "default" not in spec:
            problems.append(f"{spec_file}: `{name}` has neither a default nor `required: true`; give "
                            f"{defaults_file} and the spec its default")
    known = by_option(options)
    for name, value in defaults.items():
        if name not in known:
            problems.append(f"{defaults_file}: `{name}` is not in {spec_file}; add it (with `default: {show(value)}` "
                            "and a description) to the entry point that reads it")
    return problems


def is_template(value: Any) -> bool:
    """A defaults/main.yml value that is a Jinja expression (evaluated where the role runs)."""
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def table_problems(role: str, text: str, options: dict[str, dict[str, dict]],
                   defaults: dict[str, Any] | None = None) -> list[str]:
    readme, spec_file = f"roles/{role}/README.md", f"roles/{role}/meta/argument_specs.yml"
    _, _, bodies, _ = sections(text)
    if "Role Variables" not in bodies:
        return [f"{readme}: no `## Role Variables` section"]
    table, problems = variables_table(bodies["Role Variables"])
    problems = [f"{readme}: {p}" for p in problems]
    known = by_option(options)
    for name, places in known.items():
        spec = places[0][1]
        defaults = defaults or {}
        expected = (spec["default"] if "default" in spec else defaults[name] if is_template(defaults.get(name))
                    else MISSING if spec.get("required") else None)
        entries = [e for e, _ in places]
        row = table.get(name)
        if row is None:
            problems.append(f"{readme}: `{name}` ({', '.join(entries)}) is missing from the Role Variables table; "
                            f"add | `{name}` | `{show(expected)}` | {', '.join(entries)} | ... |")
            continue
        if (row["default"] is MISSING) != (expected is MISSING) or (
                expected is not MISSING and not same(row["default"], expected, loose_space=True)):
            problems.append(f"{readme}: `{name}` default is `{row['default_text']}`; {spec_file} says "
                            f"`{show(expected)}`")
        if sorted(row["entry_points"]) != sorted(entries):
            problems.append(f"{readme}: `{name}` entry points are {', '.join(row['entry_points']) or '(none)'}; "
                            f"{spec_file} has it in {', '.join(entries)}")
        if not row["description"]:
            problems.append(f"{readme}: `{name}` has no description")
    for name in table:
        if name not in known:
            problems.append(f"{readme}: `{name}` is in the Role Variables table but not in {spec_file}; "
                            "add it to the spec or drop the row")
    return problems


def names_role(node: Any, role: str) -> bool:
    """Whether parsed playbook YAML uses the role: ``roles: [role]``, ``roles: [{role: role}]``, or an
    ``include_role`` / ``import_role`` task with ``name: role``."""
    if isinstance(node, list):
        return any(names_role(x, role) for x in node)
    if not isinstance(node, dict):
        return False
    if any(x == role or (isinstance(x, dict) and x.get("role") == role) for x in node.get("roles") or []):
        return True
    for key in ("include_role", "import_role", "ansible.builtin.include_role", "ansible.builtin.import_role"):
        if isinstance(node.get(key), dict) and node[key].get("name") == role:
            return True
    return any(names_role(v, role) for v in node.values())


def example_problems(role: str, text: str) -> list[str]:
    readme = f"roles/{role}/README.md"
    _, _, bodies, _ = sections(text)
    blocks = yaml_blocks(bodies.get("Example Playbook", ""))
    if not blocks:
        return [f"{readme}: `## Example Playbook` holds no ```yaml code block"]
    problems = []
    for block in blocks:
        try:
            doc = yaml.safe_load(block)
        except yaml.YAMLError as exc:
            problems.append(f"{readme}: the Example Playbook's YAML does not parse: {exc}")
            continue
        if names_role(doc, role):
            return []
    return problems or [f"{readme}: the Example Playbook never names the role (roles: [{role}], or "
                        f"include_role/import_role with name: {role})"]


def fail_on(problems: list[str]) -> None:
    assert not problems, f"{len(problems)} problem(s):\n  " + "\n  ".join(problems)


def readme(role: str) -> str:
    path = ROLES_DIR / role / "README.md"
    assert path.exists(), f"roles/{role}/README.md is missing"
    return path.read_text(encoding="utf-8")

# ---- tests ------------------------------------------------------------------------------------


def test_every_role_is_checked():
    assert {"bench_report", "llm_bench", "ray_cluster", "spark_host", "vllm_server"} <= set(ROLES)


@pytest.mark.parametrize("role", ROLES)
def test_readme_has_the_ansible_role_form(role):
    fail_on(form_problems(role, readme(role)))


@pytest.mark.parametrize("role", ROLES)
def test_argument_specs_agree_with_defaults(role):
    fail_on(spec_problems(role, spec_options(role), role_defaults(role)))


@pytest.mark.parametrize("role", ROLES)
def test_readme_documents_every_option_with_its_default(role):
    fail_on(table_problems(role, readme(role), spec_options(role), role_defaults(role)))


@pytest.mark.parametrize("role", ROLES)
def test_example_playbook_parses_and_names_the_role(role):
    fail_on(example_problems(role, readme(role)))


def test_a_wrong_or_missing_row_is_reported():
    """The comparison can fail: a changed default, an extra row and a missing row are each named."""
    role = "vllm_server"
    text = readme(role)
    row = re.search(r"^\| `vllm_server_port` \| `8000` \|.*$", text, flags=re.M)
    assert row, "roles/vllm_server/README.md: expected the row | `vllm_server_port` | `8000` | ..."
    changed = text.replace(row.group(0), row.group(0).replace("`8000`", "`8001`", 1))
    assert any("`vllm_server_port` default is `8001`" in p for p in table_problems(role, changed, spec_options(role)))
    extra = text.replace(row.group(0), row.group(0) + "\n| `vllm_server_nothing` | `1` | launch | Not an option. |")
    assert any("`vllm_server_nothing` is in the Role Variables table" in p
               for p in table_problems(role, extra, spec_options(role)))
    missing = text.replace(row.group(0) + "\n", "")
    assert any("`vllm_server_port` (launch) is missing" in p for p in table_problems(role, missing, spec_options(role)))
    assert same("{{ a\n   | b }}", "{{ a | b }}", loose_space=True) and not same(True, 1) and not same("8000", 8000)
