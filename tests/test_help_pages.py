"""Help pages a person reads: the config groups' options described once (train and show) in whole sentences, and
named compactly on the other commands' pages (issue 47)."""

import contextlib
import io

import pytest

from robo_rl.cli import main
from robo_rl.config import CONF_DIR, config_groups, group_options


def help_page(command: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main([command, "--help"]) == 0
    return out.getvalue()


def leading_comment(group: str, option: str) -> str:
    """The YAML's leading comment block as one line (what a description is taken from)."""
    lines = []
    for line in (CONF_DIR / group / f"{option}.yaml").read_text().splitlines():
        if not line.startswith("#"):
            break
        text = line.lstrip("#").strip()
        if not text.startswith("@package"):
            lines.append(text)
    return " ".join(lines)


@pytest.mark.parametrize("group", config_groups())
def test_an_options_description_ends_where_its_sentence_ends(group):
    for option, text in group_options(group).items():
        rest = leading_comment(group, option)[len(text) :]
        assert leading_comment(group, option).startswith(text)
        assert rest == "" or (rest[0] == " " and rest[1:2].isupper()), (group, option, text, rest[:40])
    if group == "experiment":
        assert group_options(group)["residual_pick_cube"].endswith("corrects it every step.")


@pytest.mark.parametrize("command", ["learner", "actor", "eval"])
def test_other_commands_name_the_options_once_each_and_point_to_their_descriptions(command):
    page = help_page(command)
    for group in config_groups():
        options = group_options(group)
        (line,) = [ln for ln in page.splitlines() if ln.startswith(f"  {group}: ")]
        assert sorted(o.lstrip("*") for o in line.split(": ", 1)[1].split(", ")) == sorted(options)
    assert "no physics, for fast checks" not in page  # point_reach's description: on train's and show's pages
    assert "what each option is: robo-rl show --help" in page
    assert len(page.splitlines()) < 60
