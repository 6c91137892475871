"""Offline checks of deploy/*.yaml: strict KubeRay CRD schemas, operator rules, conventions
(the rules themselves in tests/kuberay_rules.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.kuberay_rules import (
    CRD_FILES,
    CRDS_ENV,
    CREDENTIAL_NAME,
    DEPLOY,
    GPU,
    Manifest,
    Validators,
    crd_dir,
    deploy_files,
    is_ray,
    load_documents,
    load_validators,
    manifest_problems,
    pod_spec,
    ray_documents,
    resource_sections,
)

# --- fixtures and helpers ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def validators() -> Validators:
    folder = crd_dir()
    if not folder.is_dir():
        pytest.fail(
            f"KubeRay CRDs not found at {folder}; set {CRDS_ENV} to a folder holding "
            f"{' and '.join(CRD_FILES.values())} to run the schema checks"
        )
    return load_validators(folder)


def good_job() -> Manifest:
    (doc,) = load_documents(DEPLOY / "rayjob-train.yaml")
    return doc


def head(doc: Manifest) -> dict[str, Any]:
    return doc["spec"]["rayClusterSpec"]["headGroupSpec"]


def worker(doc: Manifest) -> dict[str, Any]:
    return doc["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]


def container(group: dict[str, Any]) -> dict[str, Any]:
    return group["template"]["spec"]["containers"][0]


def add_env_var(doc: Manifest, key: str, value: Any) -> None:
    env = yaml.safe_load(doc["spec"]["runtimeEnvYAML"])
    env.setdefault("env_vars", {})[key] = value
    doc["spec"]["runtimeEnvYAML"] = yaml.safe_dump(env)


def rename(mapping: dict[str, Any], old: str, new: str) -> None:
    mapping[new] = mapping.pop(old)


def as_cluster(doc: Manifest, name: str) -> None:
    """Turn the RayJob into the RayCluster it would create."""
    doc.update(kind="RayCluster", metadata={"name": name}, spec=doc["spec"]["rayClusterSpec"])


# --- the manifests in deploy/ -----------------------------------------------------------------


def test_expected_files_exist():
    names = {path.name for path in DEPLOY.iterdir()}
    assert {
        "README.md",
        "serviceaccount.yaml",
        "raycluster.yaml",
        "rayjob-fill.yaml",
        "rayjob-train.yaml",
        "rayservice.yaml",
        "rayservice-gpu.yaml",
    } <= names


@pytest.mark.parametrize("path", deploy_files(), ids=lambda path: path.name)
def test_every_document_parses_and_is_named(path: Path):
    docs = load_documents(path)
    assert docs, f"{path.name} holds no documents"
    for doc in docs:
        assert doc.get("apiVersion"), f"{path.name}: apiVersion missing"
        assert doc.get("kind"), f"{path.name}: kind missing"
        assert (doc.get("metadata") or {}).get("name"), f"{path.name}: metadata.name missing"


@pytest.mark.parametrize("path", deploy_files(), ids=lambda path: path.name)
def test_ray_manifests_pass_strict_schema_and_rules(path: Path, validators: Validators):
    docs = [doc for doc in load_documents(path) if is_ray(doc)]
    assert [p for doc in docs for p in manifest_problems(doc, validators)] == []


@pytest.mark.parametrize("path", deploy_files(), ids=lambda path: path.name)
def test_ray_manifests_pass_rules_without_crds(path: Path):
    docs = [doc for doc in load_documents(path) if is_ray(doc)]
    assert [p for doc in docs for p in manifest_problems(doc)] == []


@pytest.mark.parametrize(
    ("filename", "kind", "script"),
    [
        ("raycluster.yaml", "RayCluster", None),
        ("rayjob-fill.yaml", "RayJob", "jobs/fill.py"),
        ("rayjob-train.yaml", "RayJob", "jobs/train.py"),
    ],
    ids=["cluster", "fill", "train"],
)
def test_each_manifest_has_a_gpu_pool_and_its_job(filename: str, kind: str, script: str | None):
    (doc,) = load_documents(DEPLOY / filename)
    assert doc["kind"] == kind
    cluster = doc["spec"]["rayClusterSpec"] if kind == "RayJob" else doc["spec"]
    gpu_groups = [
        group
        for group in cluster["workerGroupSpecs"]
        if any(GPU in limits for limits in resource_sections(group, "limits"))
    ]
    assert gpu_groups, f"{filename} has no GPU worker group"
    if script:
        assert doc["spec"]["entrypoint"].split()[1] == script


def good_service(filename: str = "rayservice-gpu.yaml") -> Manifest:
    (doc,) = load_documents(DEPLOY / filename)
    return doc


def serve_app(doc: Manifest) -> dict[str, Any]:
    return yaml.safe_load(doc["spec"]["serveConfigV2"])["applications"][0]


def set_serve_app(doc: Manifest, **changes: Any) -> None:
    config = yaml.safe_load(doc["spec"]["serveConfigV2"])
    config["applications"][0].update(changes)
    doc["spec"]["serveConfigV2"] = yaml.safe_dump(config)


@pytest.mark.parametrize(("filename", "gpus"), [("rayservice.yaml", 0),
                                                ("rayservice-gpu.yaml", 1)])
def test_rayservices_serve_raycache_on_cpu_and_gpu(filename: str, gpus: int):
    doc = good_service(filename)
    cluster = doc["spec"]["rayClusterConfig"]
    gpu_groups = [g for g in cluster["workerGroupSpecs"]
                  if any(GPU in limits for limits in resource_sections(g, "limits"))]
    assert len(gpu_groups) == gpus
    app = serve_app(doc)
    assert app["args"]["num_gpus"] == gpus and app["args"]["num_replicas"] == "auto"


RAYSERVICE_CASES = [
    pytest.param(lambda d: d["spec"]["rayClusterConfig"]["headGroupSpec"].update(
        headService={"metadata": {"name": "mine"}}),
        "headService.metadata.name must not be set", id="head-service-named"),
    pytest.param(lambda d: d["spec"].update(serveConfigV2="applications: [\n"),
                 "serveConfigV2 is not valid YAML", id="serve-config-not-yaml"),
    pytest.param(lambda d: d["spec"].update(serveConfigV2="applications: []\n"),
                 "serveConfigV2 must list applications", id="no-applications"),
    pytest.param(lambda d: set_serve_app(d, import_path="app:main"),
                 "is not raycache:serve_app", id="other-import-path"),
    pytest.param(lambda d: set_serve_app(d, args={**serve_app(d)["args"], "max_batch_size": 0}),
                 "max_batch_size=0: expected a whole number >= 1", id="bad-serve-args"),
    pytest.param(lambda d: set_serve_app(d, args={"chekpoint": "x"}),
                 "chekpoint", id="misspelt-serve-arg"),
    pytest.param(lambda d: d.update(metadata={"name": "x" * 48}),
                 "a RayService allows at most 47", id="long-service-name"),
]


@pytest.mark.parametrize(("mutate", "expected"), RAYSERVICE_CASES)
def test_rayservice_rules_report(mutate: Mutation, expected: str):
    doc = good_service()
    mutate(doc)
    problems = manifest_problems(doc)
    assert any(expected in problem for problem in problems), problems


def test_rayservice_strict_schema_reports_a_misspelt_field(validators: Validators):
    doc = good_service()
    rename(doc["spec"], "serveConfigV2", "serveConfig")
    problems = manifest_problems(doc, validators)
    assert any("'serveConfig' was unexpected" in p for p in problems), problems


def test_service_account_names_are_defined_in_deploy():
    defined = {
        doc["metadata"]["name"]
        for path in deploy_files()
        for doc in load_documents(path)
        if doc.get("kind") == "ServiceAccount"
    }
    used = set()
    for _, doc in ray_documents():
        spec = doc["spec"]
        cluster = spec.get("rayClusterSpec", spec.get("rayClusterConfig", spec))
        for group in [cluster["headGroupSpec"], *cluster.get("workerGroupSpecs", [])]:
            used.add(pod_spec(group).get("serviceAccountName"))
    assert used <= defined


# --- the validator can fail -------------------------------------------------------------------


Mutation = Callable[[Manifest], Any]

SCHEMA_CASES = [
    pytest.param(
        lambda d: rename(d["spec"], "shutdownAfterJobFinishes", "shutdownAfterJobFinish"),
        "'shutdownAfterJobFinish' was unexpected",
        id="misspelt-shutdownAfterJobFinishes",
    ),
    pytest.param(
        lambda d: container(worker(d)).update(imagePullPolcy="Always"),
        "'imagePullPolcy' was unexpected",
        id="unknown-container-field",
    ),
    pytest.param(
        lambda d: rename(worker(d), "minReplicas", "minReplica"),
        "'minReplica' was unexpected",
        id="misspelt-minReplicas",
    ),
    pytest.param(
        lambda d: head(d)["rayStartParams"].update({"num-cpus": 0}),
        "0 is not of type 'string'",
        id="rayStartParams-int",
    ),
    pytest.param(
        lambda d: container(worker(d))["resources"]["limits"].update(memory="lots"),
        "'lots' does not match",
        id="bad-quantity",
    ),
    pytest.param(
        lambda d: d["spec"].update(ttlSecondsAfterFinished="600"),
        "'600' is not of type 'integer'",
        id="ttl-as-string",
    ),
]


@pytest.mark.parametrize(("mutate", "expected"), SCHEMA_CASES)
def test_strict_schema_reports(mutate: Mutation, expected: str, validators: Validators):
    doc = good_job()
    mutate(doc)
    problems = manifest_problems(doc, validators)
    assert any(expected in problem for problem in problems), problems


RULE_CASES = [
    pytest.param(
        lambda d: worker(d).update(minReplicas=5, maxReplicas=4),
        "minReplicas (5) > maxReplicas (4)",
        id="min-above-max",
    ),
    pytest.param(
        lambda d: worker(d).update(minReplicas=-1),
        "minReplicas and maxReplicas must be >= 0",
        id="negative-replicas",
    ),
    pytest.param(
        lambda d: worker(d).pop("maxReplicas"), "maxReplicas must be set", id="maxReplicas-missing"
    ),
    pytest.param(
        lambda d: head(d)["rayStartParams"].update({"num-cpus": 0}),
        "rayStartParams['num-cpus'] must be a string",
        id="rayStartParams-int",
    ),
    pytest.param(
        lambda d: add_env_var(d, "AWS_SECRET_ACCESS_KEY", "abc"),
        "credential-looking env var 'AWS_SECRET_ACCESS_KEY'",
        id="aws-secret-in-runtime-env",
    ),
    pytest.param(
        lambda d: add_env_var(d, "AWS_ACCESS_KEY_ID", "abc"),
        "credential-looking env var 'AWS_ACCESS_KEY_ID'",
        id="aws-key-id-in-runtime-env",
    ),
    pytest.param(
        lambda d: add_env_var(d, "HF_TOKEN", "abc"),
        "credential-looking env var 'HF_TOKEN'",
        id="token-in-runtime-env",
    ),
    pytest.param(
        lambda d: add_env_var(d, "NOTE", "AKIAABCDEFGHIJKLMNOP"),
        "looks like an AWS access key id",
        id="key-value-in-runtime-env",
    ),
    pytest.param(
        lambda d: add_env_var(d, "RAYCACHE_WORKERS", 4),
        "env_vars['RAYCACHE_WORKERS'] must be a string",
        id="runtime-env-int-value",
    ),
    pytest.param(
        lambda d: d["spec"].update(runtimeEnvYAML="conda: env.yaml\n"),
        "runtimeEnvYAML sets ['conda']",
        id="runtime-env-unknown-key",
    ),
    pytest.param(
        lambda d: container(worker(d))["env"].append({"name": "DB_PASSWORD", "value": "x"}),
        "env DB_PASSWORD is a literal",
        id="literal-secret-in-container-env",
    ),
    pytest.param(
        lambda d: d["metadata"].update(name="r" * 48),
        "a RayJob allows at most 47",
        id="long-job-name",
    ),
    pytest.param(
        lambda d: as_cluster(d, "c" * 54), "a RayCluster allows at most 53", id="long-cluster-name"
    ),
    pytest.param(
        lambda d: d["metadata"].update(name="Raycache_Train"), "not a DNS-1035 label", id="bad-name"
    ),
    pytest.param(
        lambda d: d["spec"].update(clusterSelector={"ray.io/cluster": "raycache"}),
        "exactly one of rayClusterSpec or clusterSelector",
        id="spec-and-selector",
    ),
    pytest.param(
        lambda d: d["spec"].pop("rayClusterSpec"),
        "exactly one of rayClusterSpec or clusterSelector",
        id="neither-spec-nor-selector",
    ),
    pytest.param(
        lambda d: d["spec"].update(ttlSecondsAfterFinished=-1),
        "ttlSecondsAfterFinished must be >= 0",
        id="negative-ttl",
    ),
    pytest.param(
        lambda d: d["spec"].update(activeDeadlineSeconds=0),
        "activeDeadlineSeconds must be > 0",
        id="zero-deadline",
    ),
    pytest.param(
        lambda d: d["spec"].update(backoffLimit=0), "backoffLimit must be > 0", id="zero-backoff"
    ),
    pytest.param(
        lambda d: d["spec"].update(suspend=True, shutdownAfterJobFinishes=False),
        "suspend: true needs shutdownAfterJobFinishes: true",
        id="suspend-without-shutdown",
    ),
    pytest.param(
        lambda d: d["spec"].update(shutdownAfterJobFinishes=False),
        "must set shutdownAfterJobFinishes: true",
        id="batch-job-kept-alive",
    ),
    pytest.param(
        lambda d: d["spec"].update(submissionMode="K8sMode"),
        "submissionMode 'K8sMode' is not one of",
        id="bad-submission-mode",
    ),
    pytest.param(
        lambda d: d["spec"].update(entrypoint="python train.py"),
        "does not run a jobs/ script",
        id="entrypoint-outside-jobs",
    ),
    pytest.param(
        lambda d: worker(d)["template"]["spec"].update(containers=[]),
        "pod template has no containers",
        id="no-worker-containers",
    ),
    pytest.param(
        lambda d: head(d)["template"]["spec"].pop("serviceAccountName"),
        "needs serviceAccountName",
        id="no-service-account",
    ),
    pytest.param(
        lambda d: container(worker(d))["resources"]["limits"].pop("memory"),
        "resources.limits.memory is not set",
        id="no-memory-limit",
    ),
    pytest.param(
        lambda d: head(d)["rayStartParams"].update({"num-cpus": "2"}),
        'rayStartParams must set num-cpus: "0"',
        id="head-takes-work",
    ),
    pytest.param(
        lambda d: worker(d)["template"]["spec"].pop("tolerations"),
        "GPU pods need a toleration",
        id="gpu-without-toleration",
    ),
    pytest.param(
        lambda d: worker(d).update(minReplicas=1),
        "should scale to zero",
        id="gpu-pool-never-empty",
    ),
    pytest.param(
        lambda d: d["spec"]["rayClusterSpec"].update(enableInTreeAutoscaling=False),
        "needs enableInTreeAutoscaling: true",
        id="gpu-pool-without-autoscaler",
    ),
    pytest.param(
        lambda d: container(worker(d)).update(image="rayproject/ray:2.9.0-py311-gpu"),
        "does not match rayVersion",
        id="image-version-mismatch",
    ),
]


@pytest.mark.parametrize(("mutate", "expected"), RULE_CASES)
def test_rules_report(mutate: Mutation, expected: str):
    doc = good_job()
    mutate(doc)
    problems = manifest_problems(doc)
    assert any(expected in problem for problem in problems), problems


@pytest.mark.parametrize(
    ("name", "flagged"),
    [
        ("AWS_SECRET_ACCESS_KEY", True),
        ("AWS_ACCESS_KEY_ID", True),
        ("AWS_SESSION_TOKEN", True),
        ("GITHUB_TOKEN", True),
        ("DB_PASSWORD", True),
        ("MY_SECRET", True),
        ("RAYCACHE_STORE", False),
        ("RAYCACHE_TOKENIZER", False),
        ("MAX_TOKENS", False),
        ("NCCL_DEBUG", False),
    ],
    ids=str,
)
def test_credential_names(name: str, flagged: bool):
    assert bool(CREDENTIAL_NAME.search(name)) is flagged


def test_plain_crd_schema_misses_what_strict_catches(validators: Validators):
    doc = good_job()
    doc["spec"]["shutdownAfterJobFinish"] = True
    plain = load_validators(crd_dir(), strict_mode=False)
    assert list(plain["RayJob"].iter_errors(doc)) == []
    assert list(validators["RayJob"].iter_errors(doc)) != []


def test_int_or_string_quantities_accept_integers(validators: Validators):
    doc = good_job()
    container(worker(doc))["resources"]["limits"][GPU] = 1
    assert manifest_problems(doc, validators) == []
