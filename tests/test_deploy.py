"""Offline checks of deploy/*.yaml: strict KubeRay CRD schemas, operator rules, conventions."""

from __future__ import annotations

import copy
import gzip
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from jsonschema.protocols import Validator

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
CRDS_ENV = "RAYCACHE_KUBERAY_CRDS"
CRD_FILES = {"RayCluster": "ray.io_rayclusters.yaml", "RayJob": "ray.io_rayjobs.yaml",
             "RayService": "ray.io_rayservices.yaml"}
MAX_NAME_LENGTH = {"RayCluster": 53, "RayJob": 47, "RayService": 47}
DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
SUBMISSION_MODES = {"K8sJobMode", "HTTPMode", "InteractiveMode", "SidecarMode"}
GPU = "nvidia.com/gpu"
RUNTIME_ENV_KEYS = {"working_dir", "pip", "env_vars"}
ENTRYPOINT = re.compile(r"^python3? jobs/[\w./-]+\.py(\s|$)")
RAY_TAG = re.compile(r":(\d+\.\d+\.\d+)")
# TOKEN only as a whole word, so that e.g. RAYCACHE_TOKENIZER is not mistaken for a credential.
CREDENTIAL_NAME = re.compile(
    r"SECRET|PASSW(OR)?D|ACCESS_KEY|PRIVATE_KEY|API_KEY|CREDENTIAL|(^|_)TOKEN(_|$)", re.IGNORECASE
)
AWS_KEY_ID_VALUE = re.compile(r"\b(AKIA|ASIA)[0-9A-Z]{16}\b")

Manifest = dict[str, Any]
Validators = dict[str, Validator]


# --- loading ----------------------------------------------------------------------------------


def crd_dir() -> Path:
    override = os.environ.get(CRDS_ENV)
    if override:
        return Path(override)
    return Path(__file__).resolve().parent / "data" / "kuberay"


def load_documents(path: Path) -> list[Manifest]:
    with path.open() as f:
        return [doc for doc in yaml.safe_load_all(f) if doc is not None]


def deploy_files() -> list[Path]:
    return sorted(DEPLOY.glob("*.yaml"))


def ray_documents() -> Iterator[tuple[Path, Manifest]]:
    for path in deploy_files():
        for doc in load_documents(path):
            if is_ray(doc):
                yield path, doc


def is_ray(doc: Manifest) -> bool:
    return str(doc.get("apiVersion", "")).startswith("ray.io/")


def v1_schema(crd_path: Path) -> dict[str, Any]:
    if not crd_path.exists():
        crd_path = crd_path.with_name(crd_path.name + ".gz")
    opener = gzip.open if crd_path.suffix == ".gz" else open
    with opener(crd_path, "rt") as f:
        crd = yaml.load(f, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return version["schema"]["openAPIV3Schema"]


def strict(schema: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of a CRD schema in which unknown fields are errors."""
    schema = copy.deepcopy(schema)
    _tighten(schema)
    return schema


def _tighten(node: Any) -> None:
    if not isinstance(node, dict):
        return
    if node.get("x-kubernetes-int-or-string") and not {"anyOf", "oneOf", "type"} & node.keys():
        node["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if "properties" in node and not node.get("x-kubernetes-preserve-unknown-fields"):
        node.setdefault("additionalProperties", False)
    for child in node.get("properties", {}).values():
        _tighten(child)
    for key in ("items", "additionalProperties", "not"):
        _tighten(node.get(key))
    for key in ("anyOf", "allOf", "oneOf"):
        for child in node.get(key, []):
            _tighten(child)


def load_validators(folder: Path, *, strict_mode: bool = True) -> Validators:
    validators = {}
    for kind, filename in CRD_FILES.items():
        schema = v1_schema(folder / filename)
        if strict_mode:
            schema = strict(schema)
        validators[kind] = jsonschema.Draft202012Validator(schema)
    return validators


# --- the validator ----------------------------------------------------------------------------


def manifest_problems(doc: Manifest, validators: Validators | None = None) -> list[str]:
    """Every problem found in one ray.io manifest; schema checks only when validators are given."""
    kind = doc.get("kind")
    name = (doc.get("metadata") or {}).get("name", "")
    if kind not in CRD_FILES:
        return [f"{kind}/{name}: unsupported kind {kind!r}"]
    problems = []
    if doc.get("apiVersion") != "ray.io/v1":
        problems.append(f"apiVersion is {doc.get('apiVersion')!r}, expected 'ray.io/v1'")
    problems += name_problems(kind, name)
    if validators is not None:
        problems += schema_problems(validators[kind], doc)
    spec = doc.get("spec") or {}
    if kind == "RayJob":
        problems += rayjob_problems(spec)
        cluster = spec.get("rayClusterSpec")
    elif kind == "RayService":
        problems += rayservice_problems(spec)
        cluster = spec.get("rayClusterConfig")
    else:
        cluster = spec
    if cluster is not None:
        problems += cluster_problems(cluster)
    return [f"{kind}/{name}: {problem}" for problem in problems]


def name_problems(kind: str, name: str) -> list[str]:
    problems = []
    if len(name) > MAX_NAME_LENGTH[kind]:
        problems.append(
            f"name {name!r} has {len(name)} characters, a {kind} allows at most "
            f"{MAX_NAME_LENGTH[kind]}"
        )
    if not DNS_1035.match(name):
        problems.append(f"name {name!r} is not a DNS-1035 label")
    return problems


def schema_problems(validator: Validator, doc: Manifest) -> list[str]:
    problems = []
    for error in validator.iter_errors(doc):
        where = ".".join(str(part) for part in error.absolute_path) or "<root>"
        message = error.message if len(error.message) <= 300 else error.message[:300] + "..."
        problems.append(f"schema: {where}: {message}")
    return sorted(problems)


def rayjob_problems(spec: dict[str, Any]) -> list[str]:
    problems = []
    if ("rayClusterSpec" in spec) == bool(spec.get("clusterSelector")):
        problems.append("set exactly one of rayClusterSpec or clusterSelector")
    ttl = spec.get("ttlSecondsAfterFinished")
    if isinstance(ttl, int) and ttl < 0:
        problems.append(f"ttlSecondsAfterFinished must be >= 0, got {ttl}")
    for field in ("activeDeadlineSeconds", "backoffLimit"):
        value = spec.get(field)
        if isinstance(value, int) and value <= 0:
            problems.append(f"{field} must be > 0 when set, got {value}")
    if spec.get("suspend") and not spec.get("shutdownAfterJobFinishes"):
        problems.append("suspend: true needs shutdownAfterJobFinishes: true")
    mode = spec.get("submissionMode", "K8sJobMode")
    if mode not in SUBMISSION_MODES:
        problems.append(f"submissionMode {mode!r} is not one of {sorted(SUBMISSION_MODES)}")
    if "rayClusterSpec" in spec and spec.get("shutdownAfterJobFinishes") is not True:
        problems.append("a batch RayJob must set shutdownAfterJobFinishes: true")
    if not ENTRYPOINT.match(str(spec.get("entrypoint", ""))):
        problems.append(f"entrypoint {spec.get('entrypoint')!r} does not run a jobs/ script")
    problems += runtime_env_problems(spec.get("runtimeEnvYAML", ""))
    return problems


def rayservice_problems(spec: dict[str, Any]) -> list[str]:
    """The operator's RayService rules, and raycache's: every application's import_path is
    raycache's builder, and its args load as a ServeConfig and build the application."""
    problems = []
    cluster = spec.get("rayClusterConfig")
    if cluster is None:
        return ["rayClusterConfig must be set"]
    head_service = (cluster.get("headGroupSpec") or {}).get("headService") or {}
    if (head_service.get("metadata") or {}).get("name"):
        problems.append("headGroupSpec.headService.metadata.name must not be set")
    try:
        serve_config = yaml.safe_load(spec.get("serveConfigV2") or "")
    except yaml.YAMLError as error:
        return [*problems, f"serveConfigV2 is not valid YAML: {error}"]
    apps = (serve_config or {}).get("applications") if isinstance(serve_config, dict) else None
    if not apps:
        return [*problems, "serveConfigV2 must list applications"]
    for app in apps:
        name = app.get("name")
        for field in ("import_path", "route_prefix"):
            if not app.get(field):
                problems.append(f"application {name!r}: {field} must be set")
        if app.get("import_path") != "raycache:serve_app":
            problems.append(f"application {name!r}: import_path {app.get('import_path')!r} is "
                            "not raycache:serve_app")
            continue
        from raycache import ConfigError
        from raycache import serve_app as build_app

        try:
            build_app(app.get("args") or {})
        except ConfigError as error:
            problems.append(f"application {name!r}: args: {error}")
        if CREDENTIAL_NAME.search(yaml.safe_dump(app.get("runtime_env") or {})):
            problems.append(f"application {name!r}: credential-looking runtime_env")
    return problems


def runtime_env_problems(text: str) -> list[str]:
    try:
        env = yaml.safe_load(text) or {}
    except yaml.YAMLError as error:
        return [f"runtimeEnvYAML is not valid YAML: {error}"]
    if not isinstance(env, dict):
        return ["runtimeEnvYAML must be a mapping"]
    problems = []
    if extra := sorted(set(env) - RUNTIME_ENV_KEYS):
        problems.append(f"runtimeEnvYAML sets {extra}; only {sorted(RUNTIME_ENV_KEYS)} allowed")
    env_vars = env.get("env_vars") or {}
    for key, value in env_vars.items():
        if CREDENTIAL_NAME.search(str(key)):
            problems.append(f"credential-looking env var {key!r} in runtimeEnvYAML")
        if not isinstance(value, str):
            problems.append(f"runtimeEnvYAML env_vars[{key!r}] must be a string")
    if AWS_KEY_ID_VALUE.search(text):
        problems.append("runtimeEnvYAML contains what looks like an AWS access key id")
    return problems


def cluster_problems(cluster: dict[str, Any]) -> list[str]:
    head = cluster.get("headGroupSpec") or {}
    workers = cluster.get("workerGroupSpecs") or []
    problems = group_problems("head", head)
    if (head.get("rayStartParams") or {}).get("num-cpus") != "0":
        problems.append('head: rayStartParams must set num-cpus: "0"')
    if any(GPU in limits for limits in resource_sections(head, "limits", "requests")):
        problems.append("head: must not request GPUs")
    for worker in workers:
        label = f"worker group {worker.get('groupName')!r}"
        problems += group_problems(label, worker)
        problems += replica_problems(label, worker)
        if any(GPU in limits for limits in resource_sections(worker, "limits")):
            problems += gpu_group_problems(label, worker, cluster)
    problems += version_problems(cluster, [head, *workers])
    return problems


def pod_spec(group: dict[str, Any]) -> dict[str, Any]:
    return (group.get("template") or {}).get("spec") or {}


def resource_sections(group: dict[str, Any], *sections: str) -> list[dict[str, Any]]:
    return [
        (container.get("resources") or {}).get(section) or {}
        for container in pod_spec(group).get("containers") or []
        for section in sections
    ]


def group_problems(label: str, group: dict[str, Any]) -> list[str]:
    problems = []
    for key, value in (group.get("rayStartParams") or {}).items():
        if not isinstance(value, str):
            problems.append(
                f"{label}: rayStartParams[{key!r}] must be a string, got {type(value).__name__}"
            )
    spec = pod_spec(group)
    containers = spec.get("containers") or []
    if not containers:
        problems.append(f"{label}: pod template has no containers")
    if not spec.get("serviceAccountName"):
        problems.append(f"{label}: pod template needs serviceAccountName (object-store access)")
    for container in containers:
        where = f"{label}: container {container.get('name')!r}"
        resources = container.get("resources") or {}
        for section in ("requests", "limits"):
            for resource in ("cpu", "memory"):
                if resource not in (resources.get(section) or {}):
                    problems.append(f"{where}: resources.{section}.{resource} is not set")
        if GPU in (resources.get("requests") or {}) and GPU not in (resources.get("limits") or {}):
            problems.append(f"{where}: {GPU} belongs in resources.limits")
        for env in container.get("env") or []:
            if CREDENTIAL_NAME.search(env.get("name", "")) and "value" in env:
                problems.append(
                    f"{where}: env {env['name']} is a literal; use valueFrom.secretKeyRef"
                )
    return problems


def replica_problems(label: str, worker: dict[str, Any]) -> list[str]:
    low, high = worker.get("minReplicas"), worker.get("maxReplicas")
    if low is None or high is None:
        return [
            f"{label}: {field} must be set"
            for field in ("minReplicas", "maxReplicas")
            if worker.get(field) is None
        ]
    problems = []
    if low < 0 or high < 0:
        problems.append(f"{label}: minReplicas and maxReplicas must be >= 0")
    if low > high:
        problems.append(f"{label}: minReplicas ({low}) > maxReplicas ({high})")
    replicas = worker.get("replicas")
    if replicas is not None and not low <= replicas <= high:
        problems.append(f"{label}: replicas ({replicas}) outside [{low}, {high}]")
    return problems


def gpu_group_problems(label: str, worker: dict[str, Any], cluster: dict[str, Any]) -> list[str]:
    problems = []
    if not any(tolerates_gpu(t) for t in pod_spec(worker).get("tolerations") or []):
        problems.append(f"{label}: GPU pods need a toleration {GPU} Exists NoSchedule")
    if worker.get("minReplicas") != 0:
        problems.append(f"{label}: a GPU group should scale to zero (minReplicas 0)")
    if cluster.get("enableInTreeAutoscaling") is not True:
        problems.append(f"{label}: a GPU group needs enableInTreeAutoscaling: true")
    return problems


def tolerates_gpu(toleration: dict[str, Any]) -> bool:
    return (
        toleration.get("key") == GPU
        and toleration.get("operator") == "Exists"
        and toleration.get("effect") in (None, "NoSchedule")
    )


def version_problems(cluster: dict[str, Any], groups: list[dict[str, Any]]) -> list[str]:
    problems = []
    ray_version = cluster.get("rayVersion")
    for group in groups:
        for container in pod_spec(group).get("containers") or []:
            tag = RAY_TAG.search(str(container.get("image", "")))
            if tag and tag.group(1) != ray_version:
                problems.append(
                    f"image {container['image']} does not match rayVersion {ray_version!r}"
                )
    return problems


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
