"""deploy/: compose files and Kubernetes manifests against schemas, and cross-checked with the
code they start (every pdserve command line parses with the real CLI; ports, names, probes
and scrape targets agree with each other)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from gateway.tenants import TenantTable
from pdserve.cli import build_parser
from tests.unit import deploy_schemas

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
COMPOSE_FILES = ["docker-compose.yml", "docker-compose.cpu.yml"]


def _compose(name: str) -> dict:
    return yaml.safe_load((DEPLOY / name).read_text())


def _manifests() -> list[dict]:
    docs = []
    for path in sorted((DEPLOY / "k8s").glob("*.yaml")):
        if path.name != "kustomization.yaml":
            docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def _parses(argv: list[str]) -> object:
    try:
        return build_parser().parse_args(argv)
    except SystemExit:
        pytest.fail(f"the pdserve CLI rejects: {' '.join(argv)}")


def _flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


@pytest.mark.parametrize("name", COMPOSE_FILES)
def test_compose_file_matches_the_schema_and_the_cli(name):
    compose = _compose(name)
    jsonschema.validate(compose, deploy_schemas.COMPOSE)
    services = compose["services"]
    gateway = _parses(services["gateway"]["command"])
    gateways = {n for n, s in services.items() if s.get("command", [""])[0] == "gateway"}
    assert len(gateways) == 2, "two gateways over the one pool"
    for service_name, service in services.items():
        for dependency in service.get("depends_on", {}):
            assert dependency in services, f"{service_name} depends on unknown {dependency}"
        if service.get("image", "").startswith("prom/"):
            continue
        argv = service["command"]
        args = _parses(argv)
        probe = service["healthcheck"]["test"]
        assert probe[:3] == ["CMD", "pdserve", "health"]
        _parses(probe[2:])
        assert _flag(probe, "--address").endswith(f":{args.port}"), f"{service_name} probes another port"
        assert int(service["stop_grace_period"].rstrip("s")) > args.drain_grace_s
        if argv[0] in ("prefill", "decode"):
            entries = [e.split(":") for e in args.gateway.split(",")]
            assert {host for host, _ in entries} == gateways and {int(p) for _, p in entries} == {gateway.port}
            assert args.advertise_host == service_name  # the name other containers resolve
            assert args.metrics_port == gateway.metrics_port


def test_gpu_compose_gives_workers_what_cuda_ipc_needs():
    services = _compose("docker-compose.yml")["services"]
    devices = {}
    for role in ("prefill", "decode"):
        service = services[role]
        assert service["ipc"] == "host" and service["pid"] == "host"
        gpus = service["deploy"]["resources"]["reservations"]["devices"][0]
        assert sorted(gpus["device_ids"]) == ["0", "1"] and "gpu" in gpus["capabilities"]
        args = build_parser().parse_args(service["command"])
        devices[role] = args.device
        assert args.dtype == "bfloat16"
    assert devices == {"prefill": "cuda:0", "decode": "cuda:1"}
    assert build_parser().parse_args(services["prefill"]["command"]).kv_transport == "cuda_ipc"


def test_prometheus_targets_are_the_compose_services_metrics_ports():
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    targets = {t for job in config["scrape_configs"] for group in job["static_configs"] for t in group["targets"]}
    services = _compose("docker-compose.yml")["services"]
    expected = {f"{name}:{build_parser().parse_args(s['command']).metrics_port}" for name, s in services.items()
                if "command" in s and s["command"][0] in ("gateway", "prefill", "decode")}
    assert targets == expected


def test_kubernetes_manifests_match_the_schemas_and_each_other():
    docs = _manifests()
    for doc in docs:
        schema = deploy_schemas.K8S.get(doc["kind"])
        assert schema is not None, f"no schema for kind {doc['kind']}"
        jsonschema.validate(doc, schema)
    deployments = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}
    assert set(deployments) == {"pdserve-gateway", "pdserve-prefill", "pdserve-decode"}
    gateway_args = build_parser().parse_args(deployments["pdserve-gateway"]["spec"]["template"]["spec"]
                                             ["containers"][0]["args"])
    for name, deployment in deployments.items():
        pod = deployment["spec"]["template"]
        assert deployment["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
        container = pod["spec"]["containers"][0]
        args = _parses(container["args"])
        ports = {p["containerPort"] for p in container["ports"]}
        assert args.port in ports and args.metrics_port in ports
        assert int(pod["metadata"]["annotations"]["prometheus.io/port"]) == args.metrics_port
        for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
            if probe in container:
                assert container[probe]["grpc"]["port"] == args.port
        assert pod["spec"]["terminationGracePeriodSeconds"] > args.drain_grace_s
        if container["args"][0] in ("prefill", "decode"):
            assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
            assert args.advertise_host == "$(POD_IP)"
            assert any(e["name"] == "POD_IP" for e in container["env"])
            host, port = args.gateway.split(":")  # every gateway pod, by the headless Service
            assert host == "pdserve-gateway-pods" and int(port) == gateway_args.port
            assert any(s["metadata"]["name"] == host and s["spec"].get("clusterIP") == "None"
                       for s in docs if s["kind"] == "Service")
    services = [d for d in docs if d["kind"] == "Service"]
    for service in services:
        assert any(service["spec"]["selector"].items() <= d["spec"]["template"]["metadata"]["labels"].items()
                   for d in deployments.values()), f"service {service['metadata']['name']} selects no pods"
    hpa = next(d for d in docs if d["kind"] == "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"]["name"] in deployments
    metric = hpa["spec"]["metrics"][0]["pods"]["metric"]["name"]
    rules = next(d for d in docs if d["metadata"]["name"] == "pdserve-adapter-rules")["data"]["config.yaml"]
    rule = yaml.safe_load(rules)["rules"][0]
    series = rule["seriesQuery"].split("{")[0].strip("'")
    assert series == "pdserve:num_requests_waiting"  # a metric the processes export (common/process/metrics.py)
    assert metric == "pdserve_" + series.split(":", 1)[1]


def test_kustomization_lists_every_manifest():
    kustomization = yaml.safe_load((DEPLOY / "k8s" / "kustomization.yaml").read_text())
    jsonschema.validate(kustomization, deploy_schemas.KUSTOMIZATION)
    listed = set(kustomization["resources"])
    present = {p.name for p in (DEPLOY / "k8s").glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == present


def test_api_key_files_load():
    TenantTable.from_file(DEPLOY / "api-keys.example.json")
    secret = next(d for d in _manifests() if d["kind"] == "Secret")
    TenantTable.from_dict(json.loads(secret["stringData"]["api-keys.json"]))


def test_dockerfiles_install_the_project_and_create_the_model():
    for name in ("Dockerfile", "Dockerfile.cpu"):
        text = (DEPLOY / name).read_text()
        assert "torch==2.13.0" in text and "pip install ." in text and "pdserve model create" in text
        assert 'ENTRYPOINT ["pdserve"]' in text
        for package in ("common", "gateway", "prefill_worker", "decode_worker", "client", "pdserve"):
            assert f"COPY {package} {package}" in text  # every package pyproject installs
