"""`rlvr env publish` / `rlvr env install` against a real pypiserver with an htpasswd login."""

from __future__ import annotations

import pytest

from rlvr import hub


@pytest.fixture(scope="module")
def toy_dists(tmp_path_factory) -> hub.Built:
    """Wheel and sdist of a freshly scaffolded environment (what is inside does not matter to the index)."""
    project = hub.init_environment("toy-publish", tmp_path_factory.mktemp("envs"))
    return hub.build(project)


def test_publish_needs_the_right_password_and_never_replaces_a_version(
    toy_dists, package_index, credentials, rlvr
):
    project = toy_dists.wheel.parent.parent
    publish = ("env", "publish", str(project), "--repository", package_index.url)
    wrong_password = "not-" + package_index.password

    wrong = rlvr(*publish, env={**credentials, "TWINE_PASSWORD": wrong_password})
    output = wrong.stdout + wrong.stderr
    assert wrong.returncode == 1
    assert f"{package_index.url} rejected the credentials (HTTP 403)" in output
    assert "TWINE_USERNAME and TWINE_PASSWORD" in output
    assert wrong_password not in output and package_index.password not in output
    assert hub.published_versions(package_index.simple_url, "vf-toy-publish") == set()

    no_login = rlvr(*publish, env={k: v for k, v in credentials.items() if not k.startswith("TWINE_")})
    assert no_login.returncode == 1
    assert "no credentials for the upload" in no_login.stdout

    ok = rlvr(*publish, env=credentials)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert f"published vf-toy-publish 0.1.0 to {package_index.url}" in ok.stdout
    assert package_index.password not in ok.stdout + ok.stderr
    assert hub.published_versions(package_index.simple_url, "vf-toy-publish") == {"0.1.0"}
    assert {p.name for p in package_index.packages.iterdir()} >= {toy_dists.wheel.name, toy_dists.sdist.name}

    # Ours: the index is consulted before anything is uploaded.
    again = rlvr(*publish, env=credentials)
    assert again.returncode == 1
    assert f"vf-toy-publish 0.1.0 is already on {package_index.url}" in again.stdout
    assert "Bump `version` in pyproject.toml" in again.stdout

    # The server's own refusal, reached when the look-up is skipped (e.g. a race with another publisher).
    with pytest.raises(hub.HubError, match=r"refused the upload \(HTTP 400\): this version is already there"):
        hub.publish([toy_dists.wheel], package_index.url, check_existing=False)


def test_install_reports_pip_failure(tmp_path, package_index, pip_sees_only_the_index, rlvr):
    python = hub.make_fresh_venv(tmp_path / "venv")
    result = rlvr("env", "install", "vf-not-published", "--index-url", package_index.simple_url,
                  "--python", str(python))
    assert result.returncode == 1
    assert "pip install vf-not-published failed (exit code 1)" in result.stdout
    assert "No matching distribution found for vf-not-published" in result.stdout
