"""JSON schemas for the parts of the Compose spec and of Kubernetes objects that deploy/ uses.

Strict where typos hide (``additionalProperties: false`` on services and containers), so a
misspelt key fails the test instead of being ignored by the tool at deploy time.
"""

from __future__ import annotations

STRINGS = {"type": "array", "items": {"type": "string"}}
HEALTHCHECK = {
    "type": "object", "additionalProperties": False, "required": ["test"],
    "properties": {"test": STRINGS, "interval": {"type": "string"}, "timeout": {"type": "string"},
                   "retries": {"type": "integer", "minimum": 1}, "start_period": {"type": "string"}},
}
DEVICE = {
    "type": "object", "additionalProperties": False, "required": ["driver", "capabilities"],
    "properties": {"driver": {"const": "nvidia"}, "device_ids": STRINGS, "count": {},
                   "capabilities": STRINGS},
}
COMPOSE_SERVICE = {
    "type": "object", "additionalProperties": False,
    "properties": {
        "build": {"type": "object", "additionalProperties": False, "required": ["context"],
                  "properties": {"context": {"type": "string"}, "dockerfile": {"type": "string"}}},
        "image": {"type": "string"}, "command": STRINGS, "ports": STRINGS, "volumes": STRINGS,
        "environment": {"type": ["object", "array"]}, "healthcheck": HEALTHCHECK,
        "depends_on": {"type": "object", "additionalProperties": {
            "type": "object", "additionalProperties": False, "required": ["condition"],
            "properties": {"condition": {"enum": ["service_started", "service_healthy",
                                                  "service_completed_successfully"]}}}},
        "ipc": {"type": "string"}, "pid": {"type": "string"}, "restart": {"type": "string"},
        "stop_grace_period": {"type": "string", "pattern": "^[0-9]+s$"},
        "deploy": {"type": "object", "additionalProperties": False, "properties": {
            "resources": {"type": "object", "additionalProperties": False, "properties": {
                "reservations": {"type": "object", "additionalProperties": False,
                                 "properties": {"devices": {"type": "array", "items": DEVICE}}}}}}},
    },
    "anyOf": [{"required": ["image"]}, {"required": ["build"]}],
}
COMPOSE = {
    "type": "object", "required": ["services"],
    "patternProperties": {"^x-": {}},
    "properties": {"name": {"type": "string"},
                   "services": {"type": "object", "minProperties": 1, "additionalProperties": COMPOSE_SERVICE}},
    "additionalProperties": False,
}

GRPC_PROBE = {
    "type": "object", "additionalProperties": False, "required": ["grpc"],
    "properties": {"grpc": {"type": "object", "additionalProperties": False, "required": ["port"],
                            "properties": {"port": {"type": "integer"}, "service": {"type": "string"}}},
                   "periodSeconds": {"type": "integer"}, "failureThreshold": {"type": "integer"},
                   "initialDelaySeconds": {"type": "integer"}, "timeoutSeconds": {"type": "integer"}},
}
CONTAINER = {
    "type": "object", "additionalProperties": False, "required": ["name", "image"],
    "properties": {
        "name": {"type": "string"}, "image": {"type": "string"}, "args": STRINGS, "command": STRINGS,
        "env": {"type": "array", "items": {"type": "object", "required": ["name"]}},
        "ports": {"type": "array", "items": {"type": "object", "additionalProperties": False,
                                             "required": ["containerPort"],
                                             "properties": {"name": {"type": "string"},
                                                            "containerPort": {"type": "integer"}}}},
        "readinessProbe": GRPC_PROBE, "livenessProbe": GRPC_PROBE, "startupProbe": GRPC_PROBE,
        "resources": {"type": "object", "additionalProperties": False,
                      "properties": {"limits": {"type": "object"}, "requests": {"type": "object"}}},
        "volumeMounts": {"type": "array"},
    },
}
METADATA = {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}


def _object(kind: str, api_version: str, spec: dict | None = None, extra: dict | None = None) -> dict:
    properties = {"apiVersion": {"const": api_version}, "kind": {"const": kind}, "metadata": METADATA,
                  **(extra or {})}
    required = ["apiVersion", "kind", "metadata"]
    if spec is not None:
        properties["spec"] = spec
        required.append("spec")
    return {"type": "object", "required": required, "properties": properties, "additionalProperties": False}


DEPLOYMENT = _object("Deployment", "apps/v1", {
    "type": "object", "required": ["selector", "template"],
    "properties": {
        "replicas": {"type": "integer", "minimum": 0},
        "selector": {"type": "object", "required": ["matchLabels"]},
        "template": {"type": "object", "required": ["metadata", "spec"], "properties": {
            "spec": {"type": "object", "required": ["containers"], "properties": {
                "containers": {"type": "array", "minItems": 1, "items": CONTAINER},
                "terminationGracePeriodSeconds": {"type": "integer"}, "volumes": {"type": "array"}}}}},
    },
})
SERVICE = _object("Service", "v1", {
    "type": "object", "required": ["selector", "ports"],
    "properties": {"selector": {"type": "object"}, "clusterIP": {"type": "string"},
                   "ports": {"type": "array", "items": {"type": "object", "required": ["port"]}}},
})
HPA = _object("HorizontalPodAutoscaler", "autoscaling/v2", {
    "type": "object", "required": ["scaleTargetRef", "maxReplicas", "metrics"],
    "properties": {"scaleTargetRef": {"type": "object", "required": ["apiVersion", "kind", "name"]},
                   "minReplicas": {"type": "integer", "minimum": 1}, "maxReplicas": {"type": "integer"},
                   "metrics": {"type": "array", "minItems": 1}, "behavior": {"type": "object"}},
})
CONFIG_MAP = _object("ConfigMap", "v1", None, {"data": {"type": "object"}})
SECRET = _object("Secret", "v1", None, {"type": {"type": "string"}, "stringData": {"type": "object"},
                                        "data": {"type": "object"}})
NAMESPACE = _object("Namespace", "v1")
KUSTOMIZATION = {"type": "object", "required": ["apiVersion", "kind", "resources"],
                 "properties": {"apiVersion": {"const": "kustomize.config.k8s.io/v1beta1"},
                                "kind": {"const": "Kustomization"}, "namespace": {"type": "string"},
                                "resources": STRINGS}}
K8S = {"Deployment": DEPLOYMENT, "Service": SERVICE, "HorizontalPodAutoscaler": HPA, "ConfigMap": CONFIG_MAP,
       "Secret": SECRET, "Namespace": NAMESPACE}
