"""`kir completion bash|zsh`: the script, generated from kir's own parser, sourced in
a real bash: verbs, sub-verbs, each verb's options and option choices complete as
the parser defines them; the app's words (after `--`, or from the app's path on)
are left to file-name completion."""
from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess
import sys

import pytest

from kir.cli import COMMANDS, make_parser

BASH = shutil.which("bash")
pytestmark = pytest.mark.skipif(BASH is None, reason="bash is not installed")


@pytest.fixture(scope="module")
def script(tmp_path_factory) -> str:
    result = subprocess.run([sys.executable, "-m", "kir", "completion", "bash"], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    path = tmp_path_factory.mktemp("completion") / "kir.bash"
    path.write_text(result.stdout)
    return str(path)


def complete(script: str, line: str) -> list[str]:
    """What bash's completion function offers for the last word of `line` (a trailing
    space: an empty word), the way readline calls it."""
    words = shlex.split(line) + ([""] if line.endswith(" ") else [])
    program = (f"source {shlex.quote(script)}\n"
               f"COMP_WORDS=({' '.join(shlex.quote(w) for w in words)})\n"
               f"COMP_CWORD={len(words) - 1}\nCOMPREPLY=()\n_kir\nprintf '%s\\n' \"${{COMPREPLY[@]}}\"\n")
    result = subprocess.run([BASH, "--norc", "--noprofile", "-c", program], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    return [w for w in result.stdout.splitlines() if w]


def subparser(*path: str) -> argparse.ArgumentParser:
    parser = make_parser()
    for word in path:
        [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        parser = sub.choices[word]
    return parser


def options(parser: argparse.ArgumentParser) -> set[str]:
    return {o for a in parser._actions for o in a.option_strings}


def test_it_is_registered_for_kir(script):
    result = subprocess.run([BASH, "--norc", "-c", f"source {shlex.quote(script)}; complete -p kir"],
                            capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "complete -o default -F _kir kir"


def test_verbs(script):
    assert complete(script, "kir ins") == ["inspect"]
    assert complete(script, "kir re") == ["record", "records", "replay"]
    assert set(complete(script, "kir ")) == set(COMMANDS)
    assert complete(script, "kir --ver") == ["--version"]


def test_options_of_a_verb(script):
    assert sorted(complete(script, "kir inspect --ker")) == ["--kernel", "--kernels"]
    assert set(complete(script, "kir inspect --")) == {o for o in options(subparser("inspect")) if o.startswith("--")}
    assert set(complete(script, "kir hash -")) == options(subparser("hash"))
    # after an option's value, still the verb's options (the value is not a verb or a file)
    assert sorted(complete(script, "kir hash --arch sm_90 --js")) == ["--json", "--jsonl"]
    assert complete(script, "kir inspect --no-pro") == ["--no-progress"]


def test_sub_verbs(script):
    assert sorted(complete(script, "kir cache ")) == sorted(subparser("cache")._actions[-1].choices)
    assert complete(script, "kir jit c") == ["compile"]
    assert set(complete(script, "kir cache verify --")) == {o for o in options(subparser("cache", "verify"))
                                                              if o.startswith("--")}


def test_option_choices(script):
    [code] = [a for a in subparser("replay")._actions if "--code" in a.option_strings]
    assert complete(script, "kir replay --code ") == list(code.choices)
    assert complete(script, "kir replay --code p") == ["ptx"]
    assert complete(script, "kir completion ") == ["bash", "zsh"]
    assert complete(script, "kir inspect --arch ") == []  # a free value: bash's default (file names)


def test_the_apps_words_are_not_kirs(script):
    assert sorted(complete(script, "kir trace --js")) == ["--json", "--jsonl"]  # before the app: kir's options
    assert complete(script, "kir trace ./app --js") == []    # the app's: left to file-name completion
    assert complete(script, "kir record -- ./app -") == []
    assert complete(script, "kir inspect --") != []


def test_zsh_script_wraps_the_bash_one(script):
    result = subprocess.run([sys.executable, "-m", "kir", "completion", "zsh"], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0
    assert result.stdout.startswith("#compdef kir\n") and "bashcompinit" in result.stdout
    with open(script) as f:
        assert result.stdout.endswith(f.read())


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_zsh_script_loads_in_zsh():
    result = subprocess.run([sys.executable, "-m", "kir", "completion", "zsh"], capture_output=True, text=True,
                            timeout=120)
    check = subprocess.run(["zsh", "-f", "-c", "source /dev/stdin; (( $+functions[_kir] ))"], input=result.stdout,
                           capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stderr


def test_bad_shell_is_a_usage_error():
    result = subprocess.run([sys.executable, "-m", "kir", "completion", "fish"], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 2 and "invalid choice: 'fish'" in result.stderr
