"""The plan: which jobs an original's content needs. Pure.

One job per active recipe of the content's media type (every media type's when it is not
known yet), in an order where each job comes after the jobs whose outputs it takes
(:func:`~mediajobs.domain.recipes.in_order`).

**Moderation gates the renditions.** Under a policy (``POLICY_VERSION`` other than
``none``), a media type's moderation recipe (:func:`~mediajobs.domain.moderation.is_moderation`)
is planned first, one job per (content, policy), and every other recipe that takes the
original takes its decisions too (the input ``moderation``): such a job waits for the
moderation job, and its key hashes the moderation job's. Without a policy the moderation
recipe is not planned at all. A job's inputs are the original's content
(a recipe that declares none) or other jobs' named outputs of the same plan; its key hashes
them with the recipe and the policy version (:func:`~mediajobs.domain.keys.inputs_job_key`),
and each job names the jobs that wait for it (:attr:`~mediajobs.domain.jobs.JobSpec.waiting`).

The pipeline (``service_layer/claims.py``) plans with it; the tests' fakes call it too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from mediajobs.domain.jobs import DECISIONS_OUTPUT, ContentInput, JobInput, JobSpec, JobView, OutputInput
from mediajobs.domain.keys import ORIGINAL_INPUT, KeyScheme, inputs_job_key
from mediajobs.domain.manifest import derivative_prefix
from mediajobs.domain.moderation import MODERATION_INPUT, NO_POLICY, is_moderation
from mediajobs.domain.recipes import UPLOAD_MEDIA, Recipe, in_order


@dataclass(frozen=True)
class PlannedJob:
    """One job of a plan: the recipe it applies and what it is."""

    recipe: Recipe
    spec: JobSpec

    @property
    def key(self) -> str:
        """The job key."""
        return self.spec.job_key


@dataclass(frozen=True)
class Where:
    """Where a plan's original is, and the prefixes and policy a plan needs (not identity).

    Attributes
    ----------
    bucket, key: the original (its bucket holds the derivatives).
    derivatives_prefix: ``derivatives/``.
    policy_version: the moderation policy version every key carries.
    keys: how the keys are derived (the stack's :class:`~mediajobs.domain.keys.KeyScheme`).
    """

    bucket: str
    key: str
    derivatives_prefix: str
    policy_version: str
    keys: KeyScheme


def plan_jobs(
    sha256: str, media: str | None, recipes: Mapping[str, Sequence[Recipe]], where: Where
) -> tuple[PlannedJob, ...]:
    """The jobs of the content ``sha256`` (hex): for ``media``'s recipes, or every upload
    media type's when ``media`` is ``None`` (each in its own dependency order; an album's
    recipes are never planned for an upload).

    Raises
    ------
    RecipeError
        If a recipe takes an output of a recipe not active with it, or inputs form a cycle.
    """
    jobs: list[PlannedJob] = []
    for kind in [media] if media else [k for k in recipes if k in UPLOAD_MEDIA]:
        jobs.extend(_jobs_of(sha256, list(recipes.get(kind, ())), where))
    return tuple(jobs)


def _jobs_of(sha256: str, recipes: list[Recipe], where: Where) -> list[PlannedJob]:
    keys: dict[str, str] = {}
    planned: list[PlannedJob] = []
    gates = [r for r in recipes if is_moderation(r.step)] if where.policy_version != NO_POLICY else []
    gate: str | None = None
    for recipe in [*gates, *in_order([r for r in recipes if not is_moderation(r.step)])]:
        inputs: dict[str, JobInput]
        if recipe.inputs:
            inputs = {name: OutputInput(keys[i.recipe], i.output) for name, i in recipe.inputs.items()}
        else:
            inputs = {ORIGINAL_INPUT: ContentInput(sha256)}
            if gate is not None:
                inputs[MODERATION_INPUT] = OutputInput(gate, DECISIONS_OUTPUT)
        identities = {name: i.identity() for name, i in inputs.items()}
        key = inputs_job_key(identities, recipe.sha256, where.policy_version, keys=where.keys)
        keys[recipe.ref] = key
        if is_moderation(recipe.step):
            gate = key
        spec = JobSpec(
            job_key=key,
            input_sha256=sha256,
            recipe_id=recipe.id,
            recipe_version=recipe.version,
            recipe_sha256=recipe.sha256,
            policy_version=where.policy_version,
            output_prefix=derivative_prefix(where.derivatives_prefix, key),
            source_bucket=where.bucket,
            source_key=where.key,
            inputs=inputs,
            key_algorithm=where.keys.algorithm,
        )
        planned.append(PlannedJob(recipe, spec))
    waiting: dict[str, set[str]] = {}
    for job in planned:
        for upstream in job.spec.upstream:
            waiting.setdefault(upstream, set()).add(job.key)
    return [replace(j, spec=replace(j.spec, waiting=frozenset(waiting.get(j.key, ())))) for j in planned]


def media_of_rows(views: Mapping[str, JobView], recipes: Mapping[str, Sequence[Recipe]]) -> str | None:
    """The media type a content's job rows tell (the recipe of any row), or ``None``."""
    of_recipe = {r.id: kind for kind, rs in recipes.items() for r in rs}
    return next((of_recipe[v.recipe_id] for v in views.values() if v.recipe_id in of_recipe), None)
