"""A small reader of kustomizations, enough for deploy/kubernetes/ (no kubectl or kustomize binary here):
``resources`` (files and folders with a kustomization), ``components``, ``patches`` (strategic merge patches
by kind and name), ``images``, ``namespace`` and ``labels`` (on each resource's metadata). A field this reader
does not know fails the render, so a kustomization cannot say more than the tests read."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

KNOWN = {"apiVersion", "kind", "resources", "components", "patches", "images", "namespace", "labels"}
# List fields whose entries are merged by name, as kubectl's strategic merge does for these.
MERGE_BY_NAME = {"containers", "initContainers", "env", "volumes", "volumeMounts", "ports"}


def load_all(path: Path) -> list[dict[str, Any]]:
    return [document for document in yaml.safe_load_all(path.read_text()) if document]


def render(folder: Path) -> list[dict[str, Any]]:
    """The resources ``folder``'s kustomization.yaml builds, in order."""
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    unknown = set(kustomization) - KNOWN
    assert not unknown, f"{folder}: fields this reader does not render: {sorted(unknown)}"
    resources: list[dict[str, Any]] = []
    for entry in kustomization.get("resources", []):
        target = (folder / entry).resolve()
        resources.extend(render(target) if target.is_dir() else load_all(target))
    for entry in kustomization.get("components", []):
        component = (folder / entry).resolve()
        for patch in yaml.safe_load((component / "kustomization.yaml").read_text()).get("patches", []):
            _apply_patches(resources, component / patch["path"])
    for patch in kustomization.get("patches", []):
        assert set(patch) == {"path"}, f"{folder}: only strategic merge patches by path are read: {patch}"
        _apply_patches(resources, folder / patch["path"])
    for image in kustomization.get("images", []):
        _set_image(resources, image)
    for pairs in kustomization.get("labels", []):
        for resource in resources:
            resource["metadata"].setdefault("labels", {}).update(pairs["pairs"])
    if "namespace" in kustomization:
        for resource in resources:
            resource["metadata"]["namespace"] = kustomization["namespace"]
    return resources


def _apply_patches(resources: list[dict[str, Any]], path: Path) -> None:
    for patch in load_all(path):
        matches = [r for r in resources if (r["kind"], r["metadata"]["name"]) == (patch["kind"], patch["metadata"]["name"])]
        assert len(matches) == 1, f"{path}: patch for {patch['kind']}/{patch['metadata']['name']} matches {len(matches)}"
        merged = merge(matches[0], patch)
        matches[0].clear()
        matches[0].update(merged)


def merge(base: Any, patch: Any, field: str = "") -> Any:
    """Strategic merge: maps merged key by key, named lists entry by entry, other lists replaced."""
    if isinstance(base, dict) and isinstance(patch, dict):
        merged = copy.deepcopy(base)
        for key, value in patch.items():
            merged[key] = merge(base[key], value, key) if key in base else copy.deepcopy(value)
        return merged
    if isinstance(base, list) and isinstance(patch, list) and field in MERGE_BY_NAME:
        merged = copy.deepcopy(base)
        for entry in patch:
            same = [i for i, old in enumerate(merged) if old.get("name") == entry.get("name")]
            if same:
                merged[same[0]] = merge(merged[same[0]], entry)
            else:
                merged.append(copy.deepcopy(entry))
        return merged
    return copy.deepcopy(patch)


def _set_image(resources: list[dict[str, Any]], image: dict[str, str]) -> None:
    for container in containers(resources, init=True):
        name, _, _tag = container["image"].partition(":")
        if name == image["name"]:
            container["image"] = f"{image.get('newName', name)}:{image['newTag']}" if "newTag" in image else image.get("newName", name)


def pod_spec(resource: dict[str, Any]) -> dict[str, Any] | None:
    if resource["kind"] in ("Deployment", "Job"):
        return resource["spec"]["template"]["spec"]
    return None


def containers(resources: list[dict[str, Any]], init: bool = False) -> list[dict[str, Any]]:
    found = []
    for resource in resources:
        spec = pod_spec(resource)
        if spec is not None:
            found.extend(spec["containers"] + (spec.get("initContainers", []) if init else []))
    return found
