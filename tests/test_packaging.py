"""pyproject.toml lists its packages by hand (the templates live outside ``tritontune/``): a
package or template folder missing from the list is missing from the wheel, while an editable
install (what the other tests run on) still finds it. CI builds and runs the wheel itself."""

from pathlib import Path

import pytest
import yaml

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parent.parent


def setuptools_config() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_package_of_the_source_tree_is_listed():
    listed = set(setuptools_config()["packages"])
    found = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for init in (ROOT / "tritontune").rglob("__init__.py")
    }
    assert found - listed == set(), "packages missing from pyproject.toml's [tool.setuptools] packages"


def test_every_template_folder_ships_its_templates():
    config = setuptools_config()
    base = "tritontune.model_repository_templates"
    assert config["package-dir"][base] == "model_repository_templates"
    folders = {t.parent.name for t in (ROOT / "model_repository_templates").rglob("*.j2")}
    assert folders, "no templates found"
    for folder in folders:
        assert f"{base}.{folder}" in config["packages"]
        assert config["package-data"][f"{base}.{folder}"] == ["*.j2"]


def test_license_is_an_spdx_string():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0"


def test_no_install_brings_two_onnxruntime_builds():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]

    def builds(requirements: list[str]) -> set[str]:
        names = {r.split(">")[0].split("=")[0].split("[")[0].strip() for r in requirements}
        return names & {"onnxruntime", "onnxruntime-gpu"}

    assert builds(project["dependencies"]) == set(), "the base install chooses no build"
    assert builds(extras["cpu"]) == {"onnxruntime"} and builds(extras["gpu"]) == {"onnxruntime-gpu"}
    for name, requirements in extras.items():
        assert len(builds(requirements)) <= 1, name
    # the extras that bring a build bring the CPU one, so only [gpu] with them would mix builds
    assert builds(extras["local"]) == builds(extras["dev"]) == {"onnxruntime"}


def test_the_ci_example_installs_tritontune_from_the_checkout():
    workflow = yaml.safe_load((ROOT / "examples" / "ci" / "tritontune-check.yml").read_text())
    installs = [
        s["run"] for s in workflow["jobs"]["check"]["steps"] if "pip install" in s.get("run", "")
    ]
    assert installs == ['pip install "${TRITONTUNE_SOURCE}[local]"']
    assert workflow["env"]["TRITONTUNE_SOURCE"] == "."


WITHOUT_ORT = (
    "import sys\n"
    "sys.modules['onnxruntime'] = None  # as if neither onnxruntime build were installed\n"
    "from tritontune.cli import app\n"
    "app(sys.argv[1:], prog_name='tritontune')\n"
)


def test_without_onnxruntime_version_and_help_answer_and_its_users_say_what_to_install():
    """``pip install tritontune`` with no extra: the CLI starts; only what needs onnxruntime (a
    precision variant here) says so, with the install line."""
    import subprocess
    import sys

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-c", WITHOUT_ORT, *args], capture_output=True, text=True, timeout=120
        )

    version = run("--version")
    assert version.returncode == 0 and "tritontune" in version.stdout, version.stderr
    shown = run("search", "--help")
    assert shown.returncode == 0 and "--slo-p99" in shown.stdout, shown.stderr

    from tritontune.errors import InputError
    from tritontune.precision import runtime

    sys.modules["onnxruntime"], saved = None, sys.modules.get("onnxruntime")  # type: ignore[assignment]
    try:
        with pytest.raises(InputError, match=r"needs onnxruntime for .*tritontune\[cpu\]"):
            runtime.onnxruntime_module("precision variants")
    finally:
        if saved is not None:
            sys.modules["onnxruntime"] = saved
        else:
            del sys.modules["onnxruntime"]
