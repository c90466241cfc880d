"""Check that every figure README.md quotes is the figure its source holds: `python bench/figures.py`.

The table is `bench/figures.yaml`. Each entry gives the README's text as a template, `{}` where a number stands, and
per number its source, one of:
    bench/results/<file>.json :: <JSON path>   a result file and the path of the value (`runs[0].curve[-1].success`);
                                               `<JSON path> | <regex>` reads the number out of a string kept there
    BENCHMARKS.md :: <template with one {}>    for a figure no result file backs; the README's text must then say
                                               "no result file" itself
    {ratio: [<source>, <source>]}              the first over the second
    {percent: <source>}                        a fraction as a percentage (0.038 is 3.8)
The README may round: a README number with d decimals matches a source value that rounds to it at d decimals (or
within the entry's `tolerance`); `m:ss` times compare in seconds. Whitespace, line breaks and `**` are ignored in
both documents. Every `##` section of BENCHMARKS.md must name its result files (or say it has none), and every result
file it names must exist.

Exit 0 when all agree; else exit 1 with one line per disagreement: the figure, the README's text, the source's value.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "bench" / "figures.yaml"
NUMBER = r"([-+]?\d[\d,]*(?::\d\d)?(?:\.\d+)?)"  # 0.96, 1,022, +32, 8:25
RESULT_PATH = re.compile(r"bench/results/[\w.-]+\.(?:json|png)")
UNBACKED = "no result file"


def flat(text: str) -> str:
    """One space for every run of whitespace, and no markdown emphasis: a figure's text survives re-wrapping."""
    return re.sub(r"\s+", " ", text.replace("**", ""))


def numbers(template: str, text: str) -> tuple[list[str], str] | None:
    """The numbers standing at the template's `{}` in `text`, and the matched text; None when the text is absent."""
    pattern = NUMBER.join(re.escape(part) for part in flat(template).split("{}"))
    match = re.search(pattern, text)
    return (list(match.groups()), match.group(0)) if match else None


def as_float(token: str) -> float:
    if ":" in token:  # m:ss
        minutes, seconds = token.split(":")
        return int(minutes) * 60 + int(seconds)
    return float(token.replace(",", ""))


def decimals(token: str) -> int:
    return len(token.split(".")[1]) if "." in token and ":" not in token else 0


def lookup(data, path: str) -> float:
    """`a.b[0].c[-1]["d.e"]` in parsed JSON (a key holding a dot in quotes); `path | regex` takes the regex's first
    group from the string found there."""
    path, _, regex = (part.strip() for part in path.partition("|"))
    value = data
    for quoted, key, index in re.findall(r'\["([^"]+)"\]|([^.\[\]]+)|\[(-?\d+)\]', path):
        value = value[int(index)] if index else value[quoted or key]
    if regex:
        match = re.search(regex, value, re.S)
        if not match:
            raise KeyError(f"/{regex}/ not in the text at {path}")
        value = match.group(1)
    return float(value)


def source_value(source, benchmarks: str) -> tuple[float, str]:
    """The value a source names, and where it was read (for the message); KeyError naming what is missing."""
    if isinstance(source, dict) and "percent" in source:
        value, where = source_value(source["percent"], benchmarks)
        return value * 100, f"{where} x 100"
    if isinstance(source, dict):
        top, bottom = (source_value(part, benchmarks) for part in source["ratio"])
        return top[0] / bottom[0], f"{top[1]} / {bottom[1]}"
    document, _, key = (part.strip() for part in source.partition("::"))
    if document == "BENCHMARKS.md":
        got = numbers(key, benchmarks)
        if got is None:
            raise KeyError(f"BENCHMARKS.md no longer has the text {key!r}")
        return as_float(got[0][0]), f"BENCHMARKS.md {got[1]!r}"
    path = ROOT / document
    if not path.exists():
        raise KeyError(f"{document} does not exist")
    try:
        return lookup(json.loads(path.read_text()), key), f"{document} {key.split('|')[0].strip()}"
    except (KeyError, IndexError, TypeError, ValueError) as e:
        raise KeyError(f"{document} has no value at {key} ({e})") from e


def agree(readme_token: str, value: float, tolerance: float | None) -> bool:
    said = as_float(readme_token)
    return abs(said - value) <= tolerance if tolerance is not None else round(value, decimals(readme_token)) == said


def check_figure(entry: dict, readme: str, benchmarks: str) -> list[str]:
    name = entry["figure"]
    found = numbers(entry["readme"], readme)
    if found is None:
        return [f"{name}: README.md no longer has the text {entry['readme']!r}"]
    said, text = found
    if len(entry["values"]) != len(said):
        return [f"{name}: the table gives {len(entry['values'])} sources for the {len(said)} numbers of {text!r}"]
    if "BENCHMARKS.md" in json.dumps(entry["values"]) and UNBACKED not in flat(entry["readme"]):
        return [f"{name}: a figure without a result file, so its README text must say '{UNBACKED}': {text!r}"]
    problems = []
    for token, source in zip(said, entry["values"], strict=True):
        try:
            value, where = source_value(source, benchmarks)
        except KeyError as e:
            problems.append(f"{name}: README says {token} in {text!r}, but {e.args[0]}")
            continue
        if not agree(token, value, entry.get("tolerance")):
            problems.append(f"{name}: README says {token} in {text!r}, but {where} is {value:g}")
    return problems


def check_benchmarks_sections(benchmarks: str) -> list[str]:
    """Each `##` section names its result files (or says it has none); every result file named exists."""
    problems = []
    for section in re.split(r"(?m)^## ", benchmarks)[1:]:
        title = section.splitlines()[0].strip()
        named = set(RESULT_PATH.findall(section))
        if not named and UNBACKED not in flat(section).lower():
            problems.append(
                f"BENCHMARKS.md section {title!r} names no bench/results/ file and does not say '{UNBACKED}'"
            )
        problems += [
            f"BENCHMARKS.md section {title!r} names {path}, which does not exist"
            for path in sorted(named)
            if not (ROOT / path).exists()
        ]
    return problems


def main() -> int:
    readme, benchmarks = (flat((ROOT / name).read_text()) for name in ("README.md", "BENCHMARKS.md"))
    table = yaml.safe_load(TABLE.read_text())
    problems = [p for entry in table for p in check_figure(entry, readme, benchmarks)]
    problems += check_benchmarks_sections((ROOT / "BENCHMARKS.md").read_text())
    for problem in problems:
        print(problem)
    unbacked = sum("BENCHMARKS.md" in json.dumps(entry["values"]) for entry in table)
    print(
        f"{len(table)} README figures checked ({len(table) - unbacked} against result files alone, {unbacked} in part "
        f"against BENCHMARKS.md, which no result file backs): "
        f"{'all agree' if not problems else f'{len(problems)} disagreements'}"
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
