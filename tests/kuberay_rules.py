"""The rules deploy/*.yaml is held to, apart from their tests: the KubeRay CRD schemas made
strict, the operator's rules (names, submission modes, runtime envs, groups, GPUs, versions)
and the project's conventions, each a function returning the problems it finds."""

from __future__ import annotations

import copy
import gzip
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
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
