"""Ready-made ``__init__`` factories of the package's record classes, keyed by their source text.

Written by ``python scripts/render_records.py`` from the text
:func:`megatron.bridge.utils.records.record` generates for each class of the package;
``tests/unit_tests/utils/test_records.py`` fails when this module differs from it. A class whose
text is not here compiles its own ``__init__``.
"""

# ruff: noqa
# fmt: off

from collections.abc import Callable
from typing import Any

FACTORIES: dict[str, Callable[..., Any]] = {}

# megatron.bridge.check.layout:Layout
def __create_fn__(__record_set__, __record_factory__, __record_default_ep__, __record_default_etp__):
    def __init__(self, *, tp, pp, vpp, cp, dp, ep=__record_default_ep__, etp=__record_default_etp__):
        __record_set__(self, 'tp', tp)
        __record_set__(self, 'pp', pp)
        __record_set__(self, 'vpp', vpp)
        __record_set__(self, 'cp', cp)
        __record_set__(self, 'dp', dp)
        __record_set__(self, 'ep', ep)
        __record_set__(self, 'etp', etp)
    return __init__
FACTORIES["def __create_fn__(__record_set__, __record_factory__, __record_default_ep__, __record_default_etp__):\n    def __init__(self, *, tp, pp, vpp, cp, dp, ep=__record_default_ep__, etp=__record_default_etp__):\n        __record_set__(self, 'tp', tp)\n        __record_set__(self, 'pp', pp)\n        __record_set__(self, 'vpp', vpp)\n        __record_set__(self, 'cp', cp)\n        __record_set__(self, 'dp', dp)\n        __record_set__(self, 'ep', ep)\n        __record_set__(self, 'etp', etp)\n    return __init__\n"] = __create_fn__

# megatron.bridge.recipes.published:PublishedRun
def __create_fn__(__record_set__, __record_factory__):
    def __init__(self, gpu, precision, changes, source):
        __record_set__(self, 'gpu', gpu)
        __record_set__(self, 'precision', precision)
        __record_set__(self, 'changes', changes)
        __record_set__(self, 'source', source)
    return __init__
FACTORIES["def __create_fn__(__record_set__, __record_factory__):\n    def __init__(self, gpu, precision, changes, source):\n        __record_set__(self, 'gpu', gpu)\n        __record_set__(self, 'precision', precision)\n        __record_set__(self, 'changes', changes)\n        __record_set__(self, 'source', source)\n    return __init__\n"] = __create_fn__

# megatron.bridge.recipes.spec:RecipeSpec
def __create_fn__(__record_set__, __record_factory__, __record_default_provider_options__, __record_default_precision__, __record_default_tp_comm_overlap__, __record_default_preset__, __record_default_overlap__, __record_default_grad_reduce_in_fp32__, __record_default_lr__, __record_default_min_lr__, __record_default_published__, __record_default_bf16_layers__):
    def __init__(self, *, name, provider, provider_options=__record_default_provider_options__, job, precision=__record_default_precision__, tp_comm_overlap=__record_default_tp_comm_overlap__, preset=__record_default_preset__, overlap=__record_default_overlap__, grad_reduce_in_fp32=__record_default_grad_reduce_in_fp32__, lr=__record_default_lr__, min_lr=__record_default_min_lr__, published=__record_default_published__, bf16_layers=__record_default_bf16_layers__):
        __record_set__(self, 'name', name)
        __record_set__(self, 'provider', provider)
        __record_set__(self, 'provider_options', provider_options)
        __record_set__(self, 'job', job)
        __record_set__(self, 'precision', precision)
        __record_set__(self, 'tp_comm_overlap', tp_comm_overlap)
        __record_set__(self, 'preset', preset)
        __record_set__(self, 'overlap', overlap)
        __record_set__(self, 'grad_reduce_in_fp32', grad_reduce_in_fp32)
        __record_set__(self, 'lr', lr)
        __record_set__(self, 'min_lr', min_lr)
        __record_set__(self, 'published', published)
        __record_set__(self, 'bf16_layers', bf16_layers)
        self.__post_init__()
    return __init__
FACTORIES["def __create_fn__(__record_set__, __record_factory__, __record_default_provider_options__, __record_default_precision__, __record_default_tp_comm_overlap__, __record_default_preset__, __record_default_overlap__, __record_default_grad_reduce_in_fp32__, __record_default_lr__, __record_default_min_lr__, __record_default_published__, __record_default_bf16_layers__):\n    def __init__(self, *, name, provider, provider_options=__record_default_provider_options__, job, precision=__record_default_precision__, tp_comm_overlap=__record_default_tp_comm_overlap__, preset=__record_default_preset__, overlap=__record_default_overlap__, grad_reduce_in_fp32=__record_default_grad_reduce_in_fp32__, lr=__record_default_lr__, min_lr=__record_default_min_lr__, published=__record_default_published__, bf16_layers=__record_default_bf16_layers__):\n        __record_set__(self, 'name', name)\n        __record_set__(self, 'provider', provider)\n        __record_set__(self, 'provider_options', provider_options)\n        __record_set__(self, 'job', job)\n        __record_set__(self, 'precision', precision)\n        __record_set__(self, 'tp_comm_overlap', tp_comm_overlap)\n        __record_set__(self, 'preset', preset)\n        __record_set__(self, 'overlap', overlap)\n        __record_set__(self, 'grad_reduce_in_fp32', grad_reduce_in_fp32)\n        __record_set__(self, 'lr', lr)\n        __record_set__(self, 'min_lr', min_lr)\n        __record_set__(self, 'published', published)\n        __record_set__(self, 'bf16_layers', bf16_layers)\n        self.__post_init__()\n    return __init__\n"] = __create_fn__

# megatron.bridge.search.engine:Candidate
def __create_fn__(__record_set__, __record_factory__, __record_default_published__):
    def __init__(self, spec, plan, memory, estimate, layout, published=__record_default_published__):
        __record_set__(self, 'spec', spec)
        __record_set__(self, 'plan', plan)
        __record_set__(self, 'memory', memory)
        __record_set__(self, 'estimate', estimate)
        __record_set__(self, 'layout', layout)
        __record_set__(self, 'published', published)
    return __init__
FACTORIES["def __create_fn__(__record_set__, __record_factory__, __record_default_published__):\n    def __init__(self, spec, plan, memory, estimate, layout, published=__record_default_published__):\n        __record_set__(self, 'spec', spec)\n        __record_set__(self, 'plan', plan)\n        __record_set__(self, 'memory', memory)\n        __record_set__(self, 'estimate', estimate)\n        __record_set__(self, 'layout', layout)\n        __record_set__(self, 'published', published)\n    return __init__\n"] = __create_fn__

# megatron.bridge.search.engine:SearchResult
def __create_fn__(__record_set__, __record_factory__, __record_default_refusals__):
    def __init__(self, base, world_sizes, global_batch_size, ranked, published, published_note, counts, refusals=__record_default_refusals__):
        __record_set__(self, 'base', base)
        __record_set__(self, 'world_sizes', world_sizes)
        __record_set__(self, 'global_batch_size', global_batch_size)
        __record_set__(self, 'ranked', ranked)
        __record_set__(self, 'published', published)
        __record_set__(self, 'published_note', published_note)
        __record_set__(self, 'counts', counts)
        __record_set__(self, 'refusals', refusals)
    return __init__
FACTORIES["def __create_fn__(__record_set__, __record_factory__, __record_default_refusals__):\n    def __init__(self, base, world_sizes, global_batch_size, ranked, published, published_note, counts, refusals=__record_default_refusals__):\n        __record_set__(self, 'base', base)\n        __record_set__(self, 'world_sizes', world_sizes)\n        __record_set__(self, 'global_batch_size', global_batch_size)\n        __record_set__(self, 'ranked', ranked)\n        __record_set__(self, 'published', published)\n        __record_set__(self, 'published_note', published_note)\n        __record_set__(self, 'counts', counts)\n        __record_set__(self, 'refusals', refusals)\n    return __init__\n"] = __create_fn__

# megatron.bridge.search.engine:_Planned
def __create_fn__(__record_set__, __record_factory__):
    def __init__(self, spec, plan, ceiling, layout):
        __record_set__(self, 'spec', spec)
        __record_set__(self, 'plan', plan)
        __record_set__(self, 'ceiling', ceiling)
        __record_set__(self, 'layout', layout)
    return __init__
FACTORIES["def __create_fn__(__record_set__, __record_factory__):\n    def __init__(self, spec, plan, ceiling, layout):\n        __record_set__(self, 'spec', spec)\n        __record_set__(self, 'plan', plan)\n        __record_set__(self, 'ceiling', ceiling)\n        __record_set__(self, 'layout', layout)\n    return __init__\n"] = __create_fn__

# megatron.bridge.search.space:Layout
def __create_fn__(__record_set__, __record_factory__):
    def __init__(self, tp, pp, cp, ep, etp, split, micro_batch_size, recompute, sharding):
        __record_set__(self, 'tp', tp)
        __record_set__(self, 'pp', pp)
        __record_set__(self, 'cp', cp)
        __record_set__(self, 'ep', ep)
        __record_set__(self, 'etp', etp)
        __record_set__(self, 'split', split)
        __record_set__(self, 'micro_batch_size', micro_batch_size)
        __record_set__(self, 'recompute', recompute)
        __record_set__(self, 'sharding', sharding)
    return __init__
FACTORIES["def __create_fn__(__record_set__, __record_factory__):\n    def __init__(self, tp, pp, cp, ep, etp, split, micro_batch_size, recompute, sharding):\n        __record_set__(self, 'tp', tp)\n        __record_set__(self, 'pp', pp)\n        __record_set__(self, 'cp', cp)\n        __record_set__(self, 'ep', ep)\n        __record_set__(self, 'etp', etp)\n        __record_set__(self, 'split', split)\n        __record_set__(self, 'micro_batch_size', micro_batch_size)\n        __record_set__(self, 'recompute', recompute)\n        __record_set__(self, 'sharding', sharding)\n    return __init__\n"] = __create_fn__

# megatron.bridge.training.comm_overlap.knobs:Knob
def __create_fn__(__record_set__, __record_factory__, __record_default_direct__, __record_default_switch__):
    def __init__(self, *, area, kind, targets, core_default, direct=__record_default_direct__, switch=__record_default_switch__):
        __record_set__(self, 'area', area)
        __record_set__(self, 'kind', kind)
        __record_set__(self, 'targets', targets)
        __record_set__(self, 'core_default', core_default)
        __record_set__(self, 'direct', direct)
        __record_set__(self, 'switch', switch)
    return __init__
FACTORIES["def __create_fn__(__record_set__, __record_factory__, __record_default_direct__, __record_default_switch__):\n    def __init__(self, *, area, kind, targets, core_default, direct=__record_default_direct__, switch=__record_default_switch__):\n        __record_set__(self, 'area', area)\n        __record_set__(self, 'kind', kind)\n        __record_set__(self, 'targets', targets)\n        __record_set__(self, 'core_default', core_default)\n        __record_set__(self, 'direct', direct)\n        __record_set__(self, 'switch', switch)\n    return __init__\n"] = __create_fn__

# megatron.bridge.training.comm_overlap.plan:OverlapPlan
def __create_fn__(__record_set__, __record_factory__, __record_default_warnings__, __record_default_notes__, __record_default_preset_names__):
    def __init__(self, job, decisions, warnings=__record_default_warnings__, notes=__record_default_notes__, preset_names=__record_default_preset_names__):
        __record_set__(self, 'job', job)
        __record_set__(self, 'decisions', decisions)
        __record_set__(self, 'warnings', warnings)
        __record_set__(self, 'notes', notes)
        __record_set__(self, 'preset_names', preset_names)
    return __init__
FACTORIES["def __create_fn__(__record_set__, __record_factory__, __record_default_warnings__, __record_default_notes__, __record_default_preset_names__):\n    def __init__(self, job, decisions, warnings=__record_default_warnings__, notes=__record_default_notes__, preset_names=__record_default_preset_names__):\n        __record_set__(self, 'job', job)\n        __record_set__(self, 'decisions', decisions)\n        __record_set__(self, 'warnings', warnings)\n        __record_set__(self, 'notes', notes)\n        __record_set__(self, 'preset_names', preset_names)\n    return __init__\n"] = __create_fn__

# megatron.bridge.training.comm_overlap.te:TEStatus
def __create_fn__(__record_set__, __record_factory__):
    def __init__(self, available, version, reason):
        __record_set__(self, 'available', available)
        __record_set__(self, 'version', version)
        __record_set__(self, 'reason', reason)
    return __init__
FACTORIES["def __create_fn__(__record_set__, __record_factory__):\n    def __init__(self, available, version, reason):\n        __record_set__(self, 'available', available)\n        __record_set__(self, 'version', version)\n        __record_set__(self, 'reason', reason)\n    return __init__\n"] = __create_fn__

# megatron.bridge.training.env_vars:AppliedEnvVars
def __create_fn__(__record_set__, __record_factory__):
    def __init__(self, *, from_recipe, kept_from_environment, recipe_values):
        __record_set__(self, 'from_recipe', from_recipe)
        __record_set__(self, 'kept_from_environment', kept_from_environment)
        __record_set__(self, 'recipe_values', recipe_values)
    return __init__
FACTORIES["def __create_fn__(__record_set__, __record_factory__):\n    def __init__(self, *, from_recipe, kept_from_environment, recipe_values):\n        __record_set__(self, 'from_recipe', from_recipe)\n        __record_set__(self, 'kept_from_environment', kept_from_environment)\n        __record_set__(self, 'recipe_values', recipe_values)\n    return __init__\n"] = __create_fn__

# megatron.bridge.training.env_vars:DerivedEnv
def __create_fn__(__record_set__, __record_factory__):
    def __init__(self, *, gpu, precision, env):
        __record_set__(self, 'gpu', gpu)
        __record_set__(self, 'precision', precision)
        __record_set__(self, 'env', env)
    return __init__
FACTORIES["def __create_fn__(__record_set__, __record_factory__):\n    def __init__(self, *, gpu, precision, env):\n        __record_set__(self, 'gpu', gpu)\n        __record_set__(self, 'precision', precision)\n        __record_set__(self, 'env', env)\n    return __init__\n"] = __create_fn__

# megatron.bridge.training.estimate.accuracy:MeasuredAccuracy
def __create_fn__(__record_set__, __record_factory__):
    def __init__(self, family, rows, median_abs_error, median_signed_error):
        __record_set__(self, 'family', family)
        __record_set__(self, 'rows', rows)
        __record_set__(self, 'median_abs_error', median_abs_error)
        __record_set__(self, 'median_signed_error', median_signed_error)
    return __init__
FACTORIES["def __create_fn__(__record_set__, __record_factory__):\n    def __init__(self, family, rows, median_abs_error, median_signed_error):\n        __record_set__(self, 'family', family)\n        __record_set__(self, 'rows', rows)\n        __record_set__(self, 'median_abs_error', median_abs_error)\n        __record_set__(self, 'median_signed_error', median_signed_error)\n    return __init__\n"] = __create_fn__

# megatron.bridge.training.estimate.comm:Transfer
def __create_fn__(__record_set__, __record_factory__, __record_default_group__, __record_default_stride__, __record_default_routed__):
    def __init__(self, mode, collective, nbytes, span, knob, formula, group=__record_default_group__, stride=__record_default_stride__, routed=__record_default_routed__):
        __record_set__(self, 'mode', mode)
        __record_set__(self, 'collective', collective)
        __record_set__(self, 'nbytes', nbytes)
        __record_set__(self, 'span', span)
        __record_set__(self, 'knob', knob)
        __record_set__(self, 'formula', formula)
        __record_set__(self, 'group', group)
        __record_set__(self, 'stride', stride)
        __record_set__(self, 'routed', routed)
    return __init__
FACTORIES["def __create_fn__(__record_set__, __record_factory__, __record_default_group__, __record_default_stride__, __record_default_routed__):\n    def __init__(self, mode, collective, nbytes, span, knob, formula, group=__record_default_group__, stride=__record_default_stride__, routed=__record_default_routed__):\n        __record_set__(self, 'mode', mode)\n        __record_set__(self, 'collective', collective)\n        __record_set__(self, 'nbytes', nbytes)\n        __record_set__(self, 'span', span)\n        __record_set__(self, 'knob', knob)\n        __record_set__(self, 'formula', formula)\n        __record_set__(self, 'group', group)\n        __record_set__(self, 'stride', stride)\n        __record_set__(self, 'routed', routed)\n    return __init__\n"] = __create_fn__

# megatron.bridge.training.estimate.efficiency:Achievable
def __create_fn__(__record_set__, __record_factory__):
    def __init__(self, fraction, source):
        __record_set__(self, 'fraction', fraction)
        __record_set__(self, 'source', source)
    return __init__
FACTORIES["def __create_fn__(__record_set__, __record_factory__):\n    def __init__(self, fraction, source):\n        __record_set__(self, 'fraction', fraction)\n        __record_set__(self, 'source', source)\n    return __init__\n"] = __create_fn__

# megatron.bridge.training.estimate.efficiency:AchievedShare
def __create_fn__(__record_set__, __record_factory__):
    def __init__(self, nvlink, network, source):
        __record_set__(self, 'nvlink', nvlink)
        __record_set__(self, 'network', network)
        __record_set__(self, 'source', source)
    return __init__
FACTORIES["def __create_fn__(__record_set__, __record_factory__):\n    def __init__(self, nvlink, network, source):\n        __record_set__(self, 'nvlink', nvlink)\n        __record_set__(self, 'network', network)\n        __record_set__(self, 'source', source)\n    return __init__\n"] = __create_fn__

# megatron.bridge.training.estimate.efficiency:FitRow
def __create_fn__(__record_set__, __record_factory__):
    def __init__(self, model, gpu, precision, release, tokens_per_s_per_gpu, source):
        __record_set__(self, 'model', model)
        __record_set__(self, 'gpu', gpu)
        __record_set__(self, 'precision', precision)
        __record_set__(self, 'release', release)
        __record_set__(self, 'tokens_per_s_per_gpu', tokens_per_s_per_gpu)
        __record_set__(self, 'source', source)
    return __init__
FACTORIES["def __create_fn__(__record_set__, __record_factory__):\n    def __init__(self, model, gpu, precision, release, tokens_per_s_per_gpu, source):\n        __record_set__(self, 'model', model)\n        __record_set__(self, 'gpu', gpu)\n        __record_set__(self, 'precision', precision)\n        __record_set__(self, 'release', release)\n        __record_set__(self, 'tokens_per_s_per_gpu', tokens_per_s_per_gpu)\n        __record_set__(self, 'source', source)\n    return __init__\n"] = __create_fn__

# megatron.bridge.training.estimate.efficiency:OverlapAB
def __create_fn__(__record_set__, __record_factory__):
    def __init__(self, step_without, step_with, comm_seconds, source):
        __record_set__(self, 'step_without', step_without)
        __record_set__(self, 'step_with', step_with)
        __record_set__(self, 'comm_seconds', comm_seconds)
        __record_set__(self, 'source', source)
    return __init__
FACTORIES["def __create_fn__(__record_set__, __record_factory__):\n    def __init__(self, step_without, step_with, comm_seconds, source):\n        __record_set__(self, 'step_without', step_without)\n        __record_set__(self, 'step_with', step_with)\n        __record_set__(self, 'comm_seconds', comm_seconds)\n        __record_set__(self, 'source', source)\n    return __init__\n"] = __create_fn__

# megatron.bridge.training.estimate.kernels:FittedConstant
def __create_fn__(__record_set__, __record_factory__):
    def __init__(self, value, source):
        __record_set__(self, 'value', value)
        __record_set__(self, 'source', source)
    return __init__
FACTORIES["def __create_fn__(__record_set__, __record_factory__):\n    def __init__(self, value, source):\n        __record_set__(self, 'value', value)\n        __record_set__(self, 'source', source)\n    return __init__\n"] = __create_fn__

# megatron.bridge.training.estimate.memory:MemoryEstimate
def __create_fn__(__record_set__, __record_factory__, __record_default_fixes__, __record_default_pipeline_rank__, __record_default_in_flight__, __record_default_offloaded_bytes__, __record_default_gpu__, __record_default_assumptions__):
    def __init__(self, parts, total_bytes, capacity_bytes, headroom_bytes, fits, fixes=__record_default_fixes__, pipeline_rank=__record_default_pipeline_rank__, in_flight=__record_default_in_flight__, offloaded_bytes=__record_default_offloaded_bytes__, gpu=__record_default_gpu__, assumptions=__record_default_assumptions__):
        __record_set__(self, 'parts', parts)
        __record_set__(self, 'total_bytes', total_bytes)
        __record_set__(self, 'capacity_bytes', capacity_bytes)
        __record_set__(self, 'headroom_bytes', headroom_bytes)
        __record_set__(self, 'fits', fits)
        __record_set__(self, 'fixes', fixes)
        __record_set__(self, 'pipeline_rank', pipeline_rank)
        __record_set__(self, 'in_flight', in_flight)
        __record_set__(self, 'offloaded_bytes', offloaded_bytes)
        __record_set__(self, 'gpu', gpu)
        __record_set__(self, 'assumptions', assumptions)
    return __init__
FACTORIES["def __create_fn__(__record_set__, __record_factory__, __record_default_fixes__, __record_default_pipeline_rank__, __record_default_in_flight__, __record_default_offloaded_bytes__, __record_default_gpu__, __record_default_assumptions__):\n    def __init__(self, parts, total_bytes, capacity_bytes, headroom_bytes, fits, fixes=__record_default_fixes__, pipeline_rank=__record_default_pipeline_rank__, in_flight=__record_default_in_flight__, offloaded_bytes=__record_default_offloaded_bytes__, gpu=__record_default_gpu__, assumptions=__record_default_assumptions__):\n        __record_set__(self, 'parts', parts)\n        __record_set__(self, 'total_bytes', total_bytes)\n        __record_set__(self, 'capacity_bytes', capacity_bytes)\n        __record_set__(self, 'headroom_bytes', headroom_bytes)\n        __record_set__(self, 'fits', fits)\n        __record_set__(self, 'fixes', fixes)\n        __record_set__(self, 'pipeline_rank', pipeline_rank)\n        __record_set__(self, 'in_flight', in_flight)\n        __record_set__(self, 'offloaded_bytes', offloaded_bytes)\n        __record_set__(self, 'gpu', gpu)\n        __record_set__(self, 'assumptions', assumptions)\n    return __init__\n"] = __create_fn__

# megatron.bridge.training.estimate.memory:_Act
def __create_fn__(__record_set__, __record_factory__, __record_default_whole__, __record_default_split__, __record_default_routed__):
    def __init__(self, whole=__record_default_whole__, split=__record_default_split__, routed=__record_default_routed__):
        __record_set__(self, 'whole', whole)
        __record_set__(self, 'split', split)
        __record_set__(self, 'routed', routed)
    return __init__
FACTORIES["def __create_fn__(__record_set__, __record_factory__, __record_default_whole__, __record_default_split__, __record_default_routed__):\n    def __init__(self, whole=__record_default_whole__, split=__record_default_split__, routed=__record_default_routed__):\n        __record_set__(self, 'whole', whole)\n        __record_set__(self, 'split', split)\n        __record_set__(self, 'routed', routed)\n    return __init__\n"] = __create_fn__

# megatron.bridge.training.estimate.memory:_Chunk
def __create_fn__(__record_set__, __record_factory__):
    def __init__(self, layers, logits, unit, host, reload):
        __record_set__(self, 'layers', layers)
        __record_set__(self, 'logits', logits)
        __record_set__(self, 'unit', unit)
        __record_set__(self, 'host', host)
        __record_set__(self, 'reload', reload)
    return __init__
FACTORIES["def __create_fn__(__record_set__, __record_factory__):\n    def __init__(self, layers, logits, unit, host, reload):\n        __record_set__(self, 'layers', layers)\n        __record_set__(self, 'logits', logits)\n        __record_set__(self, 'unit', unit)\n        __record_set__(self, 'host', host)\n        __record_set__(self, 'reload', reload)\n    return __init__\n"] = __create_fn__

# megatron.bridge.training.estimate.memory:_Tokens
def __create_fn__(__record_set__, __record_factory__):
    def __init__(self, tokens, whole_split, tp, routed_per_token):
        __record_set__(self, 'tokens', tokens)
        __record_set__(self, 'whole_split', whole_split)
        __record_set__(self, 'tp', tp)
        __record_set__(self, 'routed_per_token', routed_per_token)
    return __init__
FACTORIES["def __create_fn__(__record_set__, __record_factory__):\n    def __init__(self, tokens, whole_split, tp, routed_per_token):\n        __record_set__(self, 'tokens', tokens)\n        __record_set__(self, 'whole_split', whole_split)\n        __record_set__(self, 'tp', tp)\n        __record_set__(self, 'routed_per_token', routed_per_token)\n    return __init__\n"] = __create_fn__

# megatron.bridge.training.estimate.model_cost:HybridPattern
def __create_fn__(__record_set__, __record_factory__):
    def __init__(self, main, mtp, mtp_depths):
        __record_set__(self, 'main', main)
        __record_set__(self, 'mtp', mtp)
        __record_set__(self, 'mtp_depths', mtp_depths)
    return __init__
FACTORIES["def __create_fn__(__record_set__, __record_factory__):\n    def __init__(self, main, mtp, mtp_depths):\n        __record_set__(self, 'main', main)\n        __record_set__(self, 'mtp', mtp)\n        __record_set__(self, 'mtp_depths', mtp_depths)\n    return __init__\n"] = __create_fn__

# megatron.bridge.training.estimate.model_cost:ModelCost
def __create_fn__(__record_set__, __record_factory__):
    def __init__(self, model):
        __record_set__(self, 'model', model)
        self.__post_init__()
    return __init__
FACTORIES["def __create_fn__(__record_set__, __record_factory__):\n    def __init__(self, model):\n        __record_set__(self, 'model', model)\n        self.__post_init__()\n    return __init__\n"] = __create_fn__

# megatron.bridge.training.estimate.model_cost:_Elements
def __create_fn__(__record_set__, __record_factory__, __record_default_whole__, __record_default_split__):
    def __init__(self, whole=__record_default_whole__, split=__record_default_split__):
        __record_set__(self, 'whole', whole)
        __record_set__(self, 'split', split)
    return __init__
FACTORIES["def __create_fn__(__record_set__, __record_factory__, __record_default_whole__, __record_default_split__):\n    def __init__(self, whole=__record_default_whole__, split=__record_default_split__):\n        __record_set__(self, 'whole', whole)\n        __record_set__(self, 'split', split)\n    return __init__\n"] = __create_fn__

# megatron.bridge.training.estimate.result:CommEntry
def __create_fn__(__record_set__, __record_factory__, __record_default_formula__, __record_default_hidden_seconds__, __record_default_exposed_seconds__, __record_default_window_seconds__):
    def __init__(self, mode, collective, bytes_per_gpu_per_step, link, seconds_at_link_peak, hidden_by, seconds_at_achieved_bandwidth, formula=__record_default_formula__, hidden_seconds=__record_default_hidden_seconds__, exposed_seconds=__record_default_exposed_seconds__, window_seconds=__record_default_window_seconds__):
        __record_set__(self, 'mode', mode)
        __record_set__(self, 'collective', collective)
        __record_set__(self, 'bytes_per_gpu_per_step', bytes_per_gpu_per_step)
        __record_set__(self, 'link', link)
        __record_set__(self, 'seconds_at_link_peak', seconds_at_link_peak)
        __record_set__(self, 'hidden_by', hidden_by)
        __record_set__(self, 'seconds_at_achieved_bandwidth', seconds_at_achieved_bandwidth)
        __record_set__(self, 'formula', formula)
        __record_set__(self, 'hidden_seconds', hidden_seconds)
        __record_set__(self, 'exposed_seconds', exposed_seconds)
        __record_set__(self, 'window_seconds', window_seconds)
    return __init__
FACTORIES["def __create_fn__(__record_set__, __record_factory__, __record_default_formula__, __record_default_hidden_seconds__, __record_default_exposed_seconds__, __record_default_window_seconds__):\n    def __init__(self, mode, collective, bytes_per_gpu_per_step, link, seconds_at_link_peak, hidden_by, seconds_at_achieved_bandwidth, formula=__record_default_formula__, hidden_seconds=__record_default_hidden_seconds__, exposed_seconds=__record_default_exposed_seconds__, window_seconds=__record_default_window_seconds__):\n        __record_set__(self, 'mode', mode)\n        __record_set__(self, 'collective', collective)\n        __record_set__(self, 'bytes_per_gpu_per_step', bytes_per_gpu_per_step)\n        __record_set__(self, 'link', link)\n        __record_set__(self, 'seconds_at_link_peak', seconds_at_link_peak)\n        __record_set__(self, 'hidden_by', hidden_by)\n        __record_set__(self, 'seconds_at_achieved_bandwidth', seconds_at_achieved_bandwidth)\n        __record_set__(self, 'formula', formula)\n        __record_set__(self, 'hidden_seconds', hidden_seconds)\n        __record_set__(self, 'exposed_seconds', exposed_seconds)\n        __record_set__(self, 'window_seconds', window_seconds)\n    return __init__\n"] = __create_fn__

# megatron.bridge.training.estimate.result:Estimate
def __create_fn__(__record_set__, __record_factory__, __record_default_executed_flops_per_gpu__, __record_default_average_flops_per_gpu__, __record_default_dense_params_per_gpu__, __record_default_expert_params_per_gpu__, __record_default_pipeline_rank__, __record_default_knobs_off__, __record_default_prediction__, __record_default_without_overlap__, __record_default_accuracy__):
    def __init__(self, model_flops_per_token, step, communication, assumptions, executed_flops_per_gpu=__record_default_executed_flops_per_gpu__, average_flops_per_gpu=__record_default_average_flops_per_gpu__, dense_params_per_gpu=__record_default_dense_params_per_gpu__, expert_params_per_gpu=__record_default_expert_params_per_gpu__, pipeline_rank=__record_default_pipeline_rank__, knobs_off=__record_default_knobs_off__, prediction=__record_default_prediction__, without_overlap=__record_default_without_overlap__, accuracy=__record_default_accuracy__):
        __record_set__(self, 'model_flops_per_token', model_flops_per_token)
        __record_set__(self, 'step', step)
        __record_set__(self, 'communication', communication)
        __record_set__(self, 'assumptions', assumptions)
        __record_set__(self, 'executed_flops_per_gpu', executed_flops_per_gpu)
        __record_set__(self, 'average_flops_per_gpu', average_flops_per_gpu)
        __record_set__(self, 'dense_params_per_gpu', dense_params_per_gpu)
        __record_set__(self, 'expert_params_per_gpu', expert_params_per_gpu)
        __record_set__(self, 'pipeline_rank', pipeline_rank)
        __record_set__(self, 'knobs_off', knobs_off)
        __record_set__(self, 'prediction', prediction)
        __record_set__(self, 'without_overlap', without_overlap)
        __record_set__(self, 'accuracy', accuracy)
    return __init__
FACTORIES["def __create_fn__(__record_set__, __record_factory__, __record_default_executed_flops_per_gpu__, __record_default_average_flops_per_gpu__, __record_default_dense_params_per_gpu__, __record_default_expert_params_per_gpu__, __record_default_pipeline_rank__, __record_default_knobs_off__, __record_default_prediction__, __record_default_without_overlap__, __record_default_accuracy__):\n    def __init__(self, model_flops_per_token, step, communication, assumptions, executed_flops_per_gpu=__record_default_executed_flops_per_gpu__, average_flops_per_gpu=__record_default_average_flops_per_gpu__, dense_params_per_gpu=__record_default_dense_params_per_gpu__, expert_params_per_gpu=__record_default_expert_params_per_gpu__, pipeline_rank=__record_default_pipeline_rank__, knobs_off=__record_default_knobs_off__, prediction=__record_default_prediction__, without_overlap=__record_default_without_overlap__, accuracy=__record_default_accuracy__):\n        __record_set__(self, 'model_flops_per_token', model_flops_per_token)\n        __record_set__(self, 'step', step)\n        __record_set__(self, 'communication', communication)\n        __record_set__(self, 'assumptions', assumptions)\n        __record_set__(self, 'executed_flops_per_gpu', executed_flops_per_gpu)\n        __record_set__(self, 'average_flops_per_gpu', average_flops_per_gpu)\n        __record_set__(self, 'dense_params_per_gpu', dense_params_per_gpu)\n        __record_set__(self, 'expert_params_per_gpu', expert_params_per_gpu)\n        __record_set__(self, 'pipeline_rank', pipeline_rank)\n        __record_set__(self, 'knobs_off', knobs_off)\n        __record_set__(self, 'prediction', prediction)\n        __record_set__(self, 'without_overlap', without_overlap)\n        __record_set__(self, 'accuracy', accuracy)\n    return __init__\n"] = __create_fn__

# megatron.bridge.training.estimate.result:Prediction
def __create_fn__(__record_set__, __record_factory__, __record_default_timeline__, __record_default_link_intervals__):
    def __init__(self, step_seconds, compute_seconds, bubble_seconds, exposed_seconds, tokens_per_s_per_gpu, achievable_fraction, achievable_source, timeline=__record_default_timeline__, link_intervals=__record_default_link_intervals__):
        __record_set__(self, 'step_seconds', step_seconds)
        __record_set__(self, 'compute_seconds', compute_seconds)
        __record_set__(self, 'bubble_seconds', bubble_seconds)
        __record_set__(self, 'exposed_seconds', exposed_seconds)
        __record_set__(self, 'tokens_per_s_per_gpu', tokens_per_s_per_gpu)
        __record_set__(self, 'achievable_fraction', achievable_fraction)
        __record_set__(self, 'achievable_source', achievable_source)
        __record_set__(self, 'timeline', timeline)
        __record_set__(self, 'link_intervals', link_intervals)
    return __init__
FACTORIES["def __create_fn__(__record_set__, __record_factory__, __record_default_timeline__, __record_default_link_intervals__):\n    def __init__(self, step_seconds, compute_seconds, bubble_seconds, exposed_seconds, tokens_per_s_per_gpu, achievable_fraction, achievable_source, timeline=__record_default_timeline__, link_intervals=__record_default_link_intervals__):\n        __record_set__(self, 'step_seconds', step_seconds)\n        __record_set__(self, 'compute_seconds', compute_seconds)\n        __record_set__(self, 'bubble_seconds', bubble_seconds)\n        __record_set__(self, 'exposed_seconds', exposed_seconds)\n        __record_set__(self, 'tokens_per_s_per_gpu', tokens_per_s_per_gpu)\n        __record_set__(self, 'achievable_fraction', achievable_fraction)\n        __record_set__(self, 'achievable_source', achievable_source)\n        __record_set__(self, 'timeline', timeline)\n        __record_set__(self, 'link_intervals', link_intervals)\n    return __init__\n"] = __create_fn__

# megatron.bridge.training.estimate.result:StepCost
def __create_fn__(__record_set__, __record_factory__):
    def __init__(self, tokens, flops_per_gpu, compute_seconds_at_peak, memory_seconds_at_peak):
        __record_set__(self, 'tokens', tokens)
        __record_set__(self, 'flops_per_gpu', flops_per_gpu)
        __record_set__(self, 'compute_seconds_at_peak', compute_seconds_at_peak)
        __record_set__(self, 'memory_seconds_at_peak', memory_seconds_at_peak)
    return __init__
FACTORIES["def __create_fn__(__record_set__, __record_factory__):\n    def __init__(self, tokens, flops_per_gpu, compute_seconds_at_peak, memory_seconds_at_peak):\n        __record_set__(self, 'tokens', tokens)\n        __record_set__(self, 'flops_per_gpu', flops_per_gpu)\n        __record_set__(self, 'compute_seconds_at_peak', compute_seconds_at_peak)\n        __record_set__(self, 'memory_seconds_at_peak', memory_seconds_at_peak)\n    return __init__\n"] = __create_fn__

# megatron.bridge.training.estimate.schedule:GradStream
def __create_fn__(__record_set__, __record_factory__):
    def __init__(self, key, link, seconds, buckets_per_chunk, overlap):
        __record_set__(self, 'key', key)
        __record_set__(self, 'link', link)
        __record_set__(self, 'seconds', seconds)
        __record_set__(self, 'buckets_per_chunk', buckets_per_chunk)
        __record_set__(self, 'overlap', overlap)
    return __init__
FACTORIES["def __create_fn__(__record_set__, __record_factory__):\n    def __init__(self, key, link, seconds, buckets_per_chunk, overlap):\n        __record_set__(self, 'key', key)\n        __record_set__(self, 'link', link)\n        __record_set__(self, 'seconds', seconds)\n        __record_set__(self, 'buckets_per_chunk', buckets_per_chunk)\n        __record_set__(self, 'overlap', overlap)\n    return __init__\n"] = __create_fn__

# megatron.bridge.training.estimate.schedule:LayerStream
def __create_fn__(__record_set__, __record_factory__):
    def __init__(self, key, link, forward_seconds, backward_seconds, hideable, window):
        __record_set__(self, 'key', key)
        __record_set__(self, 'link', link)
        __record_set__(self, 'forward_seconds', forward_seconds)
        __record_set__(self, 'backward_seconds', backward_seconds)
        __record_set__(self, 'hideable', hideable)
        __record_set__(self, 'window', window)
    return __init__
FACTORIES["def __create_fn__(__record_set__, __record_factory__):\n    def __init__(self, key, link, forward_seconds, backward_seconds, hideable, window):\n        __record_set__(self, 'key', key)\n        __record_set__(self, 'link', link)\n        __record_set__(self, 'forward_seconds', forward_seconds)\n        __record_set__(self, 'backward_seconds', backward_seconds)\n        __record_set__(self, 'hideable', hideable)\n        __record_set__(self, 'window', window)\n    return __init__\n"] = __create_fn__

# megatron.bridge.training.estimate.schedule:ParamStream
def __create_fn__(__record_set__, __record_factory__):
    def __init__(self, key, link, seconds, buckets_per_chunk, overlap, align, with_optimizer_step):
        __record_set__(self, 'key', key)
        __record_set__(self, 'link', link)
        __record_set__(self, 'seconds', seconds)
        __record_set__(self, 'buckets_per_chunk', buckets_per_chunk)
        __record_set__(self, 'overlap', overlap)
        __record_set__(self, 'align', align)
        __record_set__(self, 'with_optimizer_step', with_optimizer_step)
    return __init__
FACTORIES["def __create_fn__(__record_set__, __record_factory__):\n    def __init__(self, key, link, seconds, buckets_per_chunk, overlap, align, with_optimizer_step):\n        __record_set__(self, 'key', key)\n        __record_set__(self, 'link', link)\n        __record_set__(self, 'seconds', seconds)\n        __record_set__(self, 'buckets_per_chunk', buckets_per_chunk)\n        __record_set__(self, 'overlap', overlap)\n        __record_set__(self, 'align', align)\n        __record_set__(self, 'with_optimizer_step', with_optimizer_step)\n    return __init__\n"] = __create_fn__

# megatron.bridge.training.estimate.schedule:ScheduleInput
def __create_fn__(__record_set__, __record_factory__, __record_default_layer_streams__, __record_default_grad_streams__, __record_default_param_streams__):
    def __init__(self, forward, backward, attention_share, core_attention_share, micro_batches, vpp, pp, rank, ep_overlap, layer_streams=__record_default_layer_streams__, grad_streams=__record_default_grad_streams__, param_streams=__record_default_param_streams__):
        __record_set__(self, 'forward', forward)
        __record_set__(self, 'backward', backward)
        __record_set__(self, 'attention_share', attention_share)
        __record_set__(self, 'core_attention_share', core_attention_share)
        __record_set__(self, 'micro_batches', micro_batches)
        __record_set__(self, 'vpp', vpp)
        __record_set__(self, 'pp', pp)
        __record_set__(self, 'rank', rank)
        __record_set__(self, 'ep_overlap', ep_overlap)
        __record_set__(self, 'layer_streams', layer_streams)
        __record_set__(self, 'grad_streams', grad_streams)
        __record_set__(self, 'param_streams', param_streams)
    return __init__
FACTORIES["def __create_fn__(__record_set__, __record_factory__, __record_default_layer_streams__, __record_default_grad_streams__, __record_default_param_streams__):\n    def __init__(self, forward, backward, attention_share, core_attention_share, micro_batches, vpp, pp, rank, ep_overlap, layer_streams=__record_default_layer_streams__, grad_streams=__record_default_grad_streams__, param_streams=__record_default_param_streams__):\n        __record_set__(self, 'forward', forward)\n        __record_set__(self, 'backward', backward)\n        __record_set__(self, 'attention_share', attention_share)\n        __record_set__(self, 'core_attention_share', core_attention_share)\n        __record_set__(self, 'micro_batches', micro_batches)\n        __record_set__(self, 'vpp', vpp)\n        __record_set__(self, 'pp', pp)\n        __record_set__(self, 'rank', rank)\n        __record_set__(self, 'ep_overlap', ep_overlap)\n        __record_set__(self, 'layer_streams', layer_streams)\n        __record_set__(self, 'grad_streams', grad_streams)\n        __record_set__(self, 'param_streams', param_streams)\n    return __init__\n"] = __create_fn__

# megatron.bridge.training.estimate.schedule:StreamTime
def __create_fn__(__record_set__, __record_factory__, __record_default_hidden__, __record_default_exposed__, __record_default_window__, __record_make_intervals__):
    def __init__(self, hidden=__record_default_hidden__, exposed=__record_default_exposed__, window=__record_default_window__, intervals=__record_factory__):
        self.hidden = hidden
        self.exposed = exposed
        self.window = window
        self.intervals = __record_make_intervals__() if intervals is __record_factory__ else intervals
    return __init__
FACTORIES['def __create_fn__(__record_set__, __record_factory__, __record_default_hidden__, __record_default_exposed__, __record_default_window__, __record_make_intervals__):\n    def __init__(self, hidden=__record_default_hidden__, exposed=__record_default_exposed__, window=__record_default_window__, intervals=__record_factory__):\n        self.hidden = hidden\n        self.exposed = exposed\n        self.window = window\n        self.intervals = __record_make_intervals__() if intervals is __record_factory__ else intervals\n    return __init__\n'] = __create_fn__

# megatron.bridge.training.estimate.schedule:Timeline
def __create_fn__(__record_set__, __record_factory__):
    def __init__(self, step, compute, bubble, compute_end, segments, streams):
        self.step = step
        self.compute = compute
        self.bubble = bubble
        self.compute_end = compute_end
        self.segments = segments
        self.streams = streams
    return __init__
FACTORIES['def __create_fn__(__record_set__, __record_factory__):\n    def __init__(self, step, compute, bubble, compute_end, segments, streams):\n        self.step = step\n        self.compute = compute\n        self.bubble = bubble\n        self.compute_end = compute_end\n        self.segments = segments\n        self.streams = streams\n    return __init__\n'] = __create_fn__

# megatron.bridge.training.estimate.schedule:_Segment
def __create_fn__(__record_set__, __record_factory__):
    def __init__(self, kind, start, compute, duration, free):
        self.kind = kind
        self.start = start
        self.compute = compute
        self.duration = duration
        self.free = free
    return __init__
FACTORIES['def __create_fn__(__record_set__, __record_factory__):\n    def __init__(self, kind, start, compute, duration, free):\n        self.kind = kind\n        self.start = start\n        self.compute = compute\n        self.duration = duration\n        self.free = free\n    return __init__\n'] = __create_fn__

# megatron.bridge.training.estimate.stage:Stage
def __create_fn__(__record_set__, __record_factory__, __record_default_bf16_layers__, __record_default_bf16_gemm_flops_per_token__):
    def __init__(self, rank, layers, moe_share, first, last, micro_batch_size, micro_batches, vpp, recompute_full, recompute_modules, flops_per_token, recompute_flops_per_token, elementwise_bytes_per_token, recompute_elementwise_bytes_per_token, bf16_layers=__record_default_bf16_layers__, bf16_gemm_flops_per_token=__record_default_bf16_gemm_flops_per_token__):
        __record_set__(self, 'rank', rank)
        __record_set__(self, 'layers', layers)
        __record_set__(self, 'moe_share', moe_share)
        __record_set__(self, 'first', first)
        __record_set__(self, 'last', last)
        __record_set__(self, 'micro_batch_size', micro_batch_size)
        __record_set__(self, 'micro_batches', micro_batches)
        __record_set__(self, 'vpp', vpp)
        __record_set__(self, 'recompute_full', recompute_full)
        __record_set__(self, 'recompute_modules', recompute_modules)
        __record_set__(self, 'flops_per_token', flops_per_token)
        __record_set__(self, 'recompute_flops_per_token', recompute_flops_per_token)
        __record_set__(self, 'elementwise_bytes_per_token', elementwise_bytes_per_token)
        __record_set__(self, 'recompute_elementwise_bytes_per_token', recompute_elementwise_bytes_per_token)
        __record_set__(self, 'bf16_layers', bf16_layers)
        __record_set__(self, 'bf16_gemm_flops_per_token', bf16_gemm_flops_per_token)
    return __init__
FACTORIES["def __create_fn__(__record_set__, __record_factory__, __record_default_bf16_layers__, __record_default_bf16_gemm_flops_per_token__):\n    def __init__(self, rank, layers, moe_share, first, last, micro_batch_size, micro_batches, vpp, recompute_full, recompute_modules, flops_per_token, recompute_flops_per_token, elementwise_bytes_per_token, recompute_elementwise_bytes_per_token, bf16_layers=__record_default_bf16_layers__, bf16_gemm_flops_per_token=__record_default_bf16_gemm_flops_per_token__):\n        __record_set__(self, 'rank', rank)\n        __record_set__(self, 'layers', layers)\n        __record_set__(self, 'moe_share', moe_share)\n        __record_set__(self, 'first', first)\n        __record_set__(self, 'last', last)\n        __record_set__(self, 'micro_batch_size', micro_batch_size)\n        __record_set__(self, 'micro_batches', micro_batches)\n        __record_set__(self, 'vpp', vpp)\n        __record_set__(self, 'recompute_full', recompute_full)\n        __record_set__(self, 'recompute_modules', recompute_modules)\n        __record_set__(self, 'flops_per_token', flops_per_token)\n        __record_set__(self, 'recompute_flops_per_token', recompute_flops_per_token)\n        __record_set__(self, 'elementwise_bytes_per_token', elementwise_bytes_per_token)\n        __record_set__(self, 'recompute_elementwise_bytes_per_token', recompute_elementwise_bytes_per_token)\n        __record_set__(self, 'bf16_layers', bf16_layers)\n        __record_set__(self, 'bf16_gemm_flops_per_token', bf16_gemm_flops_per_token)\n    return __init__\n"] = __create_fn__

# megatron.bridge.training.estimate.step:KernelSeconds
def __create_fn__(__record_set__, __record_factory__, __record_default_grouped_gemm__, __record_default_grouped_gemm_efficiency__, __record_default_ssm_scan__, __record_default_ssm_source__, __record_default_loss__, __record_default_unfused_experts__, __record_default_unfused_source__, __record_default_sparse_attention__, __record_default_sparse_source__, __record_default_forward_share__):
    def __init__(self, grouped_gemm=__record_default_grouped_gemm__, grouped_gemm_efficiency=__record_default_grouped_gemm_efficiency__, ssm_scan=__record_default_ssm_scan__, ssm_source=__record_default_ssm_source__, loss=__record_default_loss__, unfused_experts=__record_default_unfused_experts__, unfused_source=__record_default_unfused_source__, sparse_attention=__record_default_sparse_attention__, sparse_source=__record_default_sparse_source__, forward_share=__record_default_forward_share__):
        __record_set__(self, 'grouped_gemm', grouped_gemm)
        __record_set__(self, 'grouped_gemm_efficiency', grouped_gemm_efficiency)
        __record_set__(self, 'ssm_scan', ssm_scan)
        __record_set__(self, 'ssm_source', ssm_source)
        __record_set__(self, 'loss', loss)
        __record_set__(self, 'unfused_experts', unfused_experts)
        __record_set__(self, 'unfused_source', unfused_source)
        __record_set__(self, 'sparse_attention', sparse_attention)
        __record_set__(self, 'sparse_source', sparse_source)
        __record_set__(self, 'forward_share', forward_share)
    return __init__
FACTORIES["def __create_fn__(__record_set__, __record_factory__, __record_default_grouped_gemm__, __record_default_grouped_gemm_efficiency__, __record_default_ssm_scan__, __record_default_ssm_source__, __record_default_loss__, __record_default_unfused_experts__, __record_default_unfused_source__, __record_default_sparse_attention__, __record_default_sparse_source__, __record_default_forward_share__):\n    def __init__(self, grouped_gemm=__record_default_grouped_gemm__, grouped_gemm_efficiency=__record_default_grouped_gemm_efficiency__, ssm_scan=__record_default_ssm_scan__, ssm_source=__record_default_ssm_source__, loss=__record_default_loss__, unfused_experts=__record_default_unfused_experts__, unfused_source=__record_default_unfused_source__, sparse_attention=__record_default_sparse_attention__, sparse_source=__record_default_sparse_source__, forward_share=__record_default_forward_share__):\n        __record_set__(self, 'grouped_gemm', grouped_gemm)\n        __record_set__(self, 'grouped_gemm_efficiency', grouped_gemm_efficiency)\n        __record_set__(self, 'ssm_scan', ssm_scan)\n        __record_set__(self, 'ssm_source', ssm_source)\n        __record_set__(self, 'loss', loss)\n        __record_set__(self, 'unfused_experts', unfused_experts)\n        __record_set__(self, 'unfused_source', unfused_source)\n        __record_set__(self, 'sparse_attention', sparse_attention)\n        __record_set__(self, 'sparse_source', sparse_source)\n        __record_set__(self, 'forward_share', forward_share)\n    return __init__\n"] = __create_fn__

# megatron.bridge.training.estimate.step:StageCompute
def __create_fn__(__record_set__, __record_factory__):
    def __init__(self, seconds_per_flop, mixer_share, core_share, model_flops, executed, memory_forward, memory, kernels, fraction):
        __record_set__(self, 'seconds_per_flop', seconds_per_flop)
        __record_set__(self, 'mixer_share', mixer_share)
        __record_set__(self, 'core_share', core_share)
        __record_set__(self, 'model_flops', model_flops)
        __record_set__(self, 'executed', executed)
        __record_set__(self, 'memory_forward', memory_forward)
        __record_set__(self, 'memory', memory)
        __record_set__(self, 'kernels', kernels)
        __record_set__(self, 'fraction', fraction)
    return __init__
FACTORIES["def __create_fn__(__record_set__, __record_factory__):\n    def __init__(self, seconds_per_flop, mixer_share, core_share, model_flops, executed, memory_forward, memory, kernels, fraction):\n        __record_set__(self, 'seconds_per_flop', seconds_per_flop)\n        __record_set__(self, 'mixer_share', mixer_share)\n        __record_set__(self, 'core_share', core_share)\n        __record_set__(self, 'model_flops', model_flops)\n        __record_set__(self, 'executed', executed)\n        __record_set__(self, 'memory_forward', memory_forward)\n        __record_set__(self, 'memory', memory)\n        __record_set__(self, 'kernels', kernels)\n        __record_set__(self, 'fraction', fraction)\n    return __init__\n"] = __create_fn__

# megatron.bridge.training.estimate.step:_Shape
def __create_fn__(__record_set__, __record_factory__):
    def __init__(self, forward, backward, attention_share, core_attention_share):
        __record_set__(self, 'forward', forward)
        __record_set__(self, 'backward', backward)
        __record_set__(self, 'attention_share', attention_share)
        __record_set__(self, 'core_attention_share', core_attention_share)
    return __init__
FACTORIES["def __create_fn__(__record_set__, __record_factory__):\n    def __init__(self, forward, backward, attention_share, core_attention_share):\n        __record_set__(self, 'forward', forward)\n        __record_set__(self, 'backward', backward)\n        __record_set__(self, 'attention_share', attention_share)\n        __record_set__(self, 'core_attention_share', core_attention_share)\n    return __init__\n"] = __create_fn__

# megatron.bridge.training.hardware:GpuSpec
def __create_fn__(__record_set__, __record_factory__, __record_default_peak_bf16_tflops__, __record_default_peak_fp8_tflops__, __record_default_peak_fp4_tflops__, __record_default_nvlink_gb_per_s__, __record_default_network_gb_per_s__, __record_default_nvlink_domain__, __record_default_gpus_per_node__, __record_default_memory_gb__):
    def __init__(self, *, name, compute_capability, preset_family, peak_bf16_tflops=__record_default_peak_bf16_tflops__, peak_fp8_tflops=__record_default_peak_fp8_tflops__, peak_fp4_tflops=__record_default_peak_fp4_tflops__, nvlink_gb_per_s=__record_default_nvlink_gb_per_s__, network_gb_per_s=__record_default_network_gb_per_s__, hbm_gb_per_s, nvlink_domain=__record_default_nvlink_domain__, gpus_per_node=__record_default_gpus_per_node__, memory_gb=__record_default_memory_gb__):
        __record_set__(self, 'name', name)
        __record_set__(self, 'compute_capability', compute_capability)
        __record_set__(self, 'preset_family', preset_family)
        __record_set__(self, 'peak_bf16_tflops', peak_bf16_tflops)
        __record_set__(self, 'peak_fp8_tflops', peak_fp8_tflops)
        __record_set__(self, 'peak_fp4_tflops', peak_fp4_tflops)
        __record_set__(self, 'nvlink_gb_per_s', nvlink_gb_per_s)
        __record_set__(self, 'network_gb_per_s', network_gb_per_s)
        __record_set__(self, 'hbm_gb_per_s', hbm_gb_per_s)
        __record_set__(self, 'nvlink_domain', nvlink_domain)
        __record_set__(self, 'gpus_per_node', gpus_per_node)
        __record_set__(self, 'memory_gb', memory_gb)
    return __init__
FACTORIES["def __create_fn__(__record_set__, __record_factory__, __record_default_peak_bf16_tflops__, __record_default_peak_fp8_tflops__, __record_default_peak_fp4_tflops__, __record_default_nvlink_gb_per_s__, __record_default_network_gb_per_s__, __record_default_nvlink_domain__, __record_default_gpus_per_node__, __record_default_memory_gb__):\n    def __init__(self, *, name, compute_capability, preset_family, peak_bf16_tflops=__record_default_peak_bf16_tflops__, peak_fp8_tflops=__record_default_peak_fp8_tflops__, peak_fp4_tflops=__record_default_peak_fp4_tflops__, nvlink_gb_per_s=__record_default_nvlink_gb_per_s__, network_gb_per_s=__record_default_network_gb_per_s__, hbm_gb_per_s, nvlink_domain=__record_default_nvlink_domain__, gpus_per_node=__record_default_gpus_per_node__, memory_gb=__record_default_memory_gb__):\n        __record_set__(self, 'name', name)\n        __record_set__(self, 'compute_capability', compute_capability)\n        __record_set__(self, 'preset_family', preset_family)\n        __record_set__(self, 'peak_bf16_tflops', peak_bf16_tflops)\n        __record_set__(self, 'peak_fp8_tflops', peak_fp8_tflops)\n        __record_set__(self, 'peak_fp4_tflops', peak_fp4_tflops)\n        __record_set__(self, 'nvlink_gb_per_s', nvlink_gb_per_s)\n        __record_set__(self, 'network_gb_per_s', network_gb_per_s)\n        __record_set__(self, 'hbm_gb_per_s', hbm_gb_per_s)\n        __record_set__(self, 'nvlink_domain', nvlink_domain)\n        __record_set__(self, 'gpus_per_node', gpus_per_node)\n        __record_set__(self, 'memory_gb', memory_gb)\n    return __init__\n"] = __create_fn__

# megatron.bridge.training.initialize:UserbufferSettings
def __create_fn__(__record_set__, __record_factory__):
    def __init__(self, shape, tp_size, ub_cfgs, bootstrap_backend, fp8):
        __record_set__(self, 'shape', shape)
        __record_set__(self, 'tp_size', tp_size)
        __record_set__(self, 'ub_cfgs', ub_cfgs)
        __record_set__(self, 'bootstrap_backend', bootstrap_backend)
        __record_set__(self, 'fp8', fp8)
    return __init__
FACTORIES["def __create_fn__(__record_set__, __record_factory__):\n    def __init__(self, shape, tp_size, ub_cfgs, bootstrap_backend, fp8):\n        __record_set__(self, 'shape', shape)\n        __record_set__(self, 'tp_size', tp_size)\n        __record_set__(self, 'ub_cfgs', ub_cfgs)\n        __record_set__(self, 'bootstrap_backend', bootstrap_backend)\n        __record_set__(self, 'fp8', fp8)\n    return __init__\n"] = __create_fn__

# megatron.bridge.training.job:JobDescription
def __create_fn__(__record_set__, __record_factory__, __record_default_world_size__, __record_default_gpu__, __record_default_micro_batch_size__, __record_default_global_batch_size__, __record_default_use_distributed_optimizer__, __record_default_megatron_ddp__, __record_default_use_megatron_fsdp__, __record_default_num_distributed_optimizer_instances__, __record_default_outer_dp_sharding_strategy__, __record_default_num_buckets__, __record_default_grad_reduce_in_fp32__, __record_default_fp8_param_gather__, __record_default_fp4_param_gather__, __record_default_optimizer_cpu_offload__, __record_default_optimizer_offload_fraction__, __record_default_te_available__, __record_default_te_reason__, __record_default_te_version__, __record_default_direct_settings__, __record_default_distributed_optimizer_turned_on__):
    def __init__(self, *, model, world_size=__record_default_world_size__, gpu=__record_default_gpu__, micro_batch_size=__record_default_micro_batch_size__, global_batch_size=__record_default_global_batch_size__, use_distributed_optimizer=__record_default_use_distributed_optimizer__, megatron_ddp=__record_default_megatron_ddp__, use_megatron_fsdp=__record_default_use_megatron_fsdp__, num_distributed_optimizer_instances=__record_default_num_distributed_optimizer_instances__, outer_dp_sharding_strategy=__record_default_outer_dp_sharding_strategy__, num_buckets=__record_default_num_buckets__, grad_reduce_in_fp32=__record_default_grad_reduce_in_fp32__, fp8_param_gather=__record_default_fp8_param_gather__, fp4_param_gather=__record_default_fp4_param_gather__, optimizer_cpu_offload=__record_default_optimizer_cpu_offload__, optimizer_offload_fraction=__record_default_optimizer_offload_fraction__, te_available=__record_default_te_available__, te_reason=__record_default_te_reason__, te_version=__record_default_te_version__, direct_settings=__record_default_direct_settings__, distributed_optimizer_turned_on=__record_default_distributed_optimizer_turned_on__):
        __record_set__(self, 'model', model)
        __record_set__(self, 'world_size', world_size)
        __record_set__(self, 'gpu', gpu)
        __record_set__(self, 'micro_batch_size', micro_batch_size)
        __record_set__(self, 'global_batch_size', global_batch_size)
        __record_set__(self, 'use_distributed_optimizer', use_distributed_optimizer)
        __record_set__(self, 'megatron_ddp', megatron_ddp)
        __record_set__(self, 'use_megatron_fsdp', use_megatron_fsdp)
        __record_set__(self, 'num_distributed_optimizer_instances', num_distributed_optimizer_instances)
        __record_set__(self, 'outer_dp_sharding_strategy', outer_dp_sharding_strategy)
        __record_set__(self, 'num_buckets', num_buckets)
        __record_set__(self, 'grad_reduce_in_fp32', grad_reduce_in_fp32)
        __record_set__(self, 'fp8_param_gather', fp8_param_gather)
        __record_set__(self, 'fp4_param_gather', fp4_param_gather)
        __record_set__(self, 'optimizer_cpu_offload', optimizer_cpu_offload)
        __record_set__(self, 'optimizer_offload_fraction', optimizer_offload_fraction)
        __record_set__(self, 'te_available', te_available)
        __record_set__(self, 'te_reason', te_reason)
        __record_set__(self, 'te_version', te_version)
        __record_set__(self, 'direct_settings', direct_settings)
        __record_set__(self, 'distributed_optimizer_turned_on', distributed_optimizer_turned_on)
    return __init__
FACTORIES["def __create_fn__(__record_set__, __record_factory__, __record_default_world_size__, __record_default_gpu__, __record_default_micro_batch_size__, __record_default_global_batch_size__, __record_default_use_distributed_optimizer__, __record_default_megatron_ddp__, __record_default_use_megatron_fsdp__, __record_default_num_distributed_optimizer_instances__, __record_default_outer_dp_sharding_strategy__, __record_default_num_buckets__, __record_default_grad_reduce_in_fp32__, __record_default_fp8_param_gather__, __record_default_fp4_param_gather__, __record_default_optimizer_cpu_offload__, __record_default_optimizer_offload_fraction__, __record_default_te_available__, __record_default_te_reason__, __record_default_te_version__, __record_default_direct_settings__, __record_default_distributed_optimizer_turned_on__):\n    def __init__(self, *, model, world_size=__record_default_world_size__, gpu=__record_default_gpu__, micro_batch_size=__record_default_micro_batch_size__, global_batch_size=__record_default_global_batch_size__, use_distributed_optimizer=__record_default_use_distributed_optimizer__, megatron_ddp=__record_default_megatron_ddp__, use_megatron_fsdp=__record_default_use_megatron_fsdp__, num_distributed_optimizer_instances=__record_default_num_distributed_optimizer_instances__, outer_dp_sharding_strategy=__record_default_outer_dp_sharding_strategy__, num_buckets=__record_default_num_buckets__, grad_reduce_in_fp32=__record_default_grad_reduce_in_fp32__, fp8_param_gather=__record_default_fp8_param_gather__, fp4_param_gather=__record_default_fp4_param_gather__, optimizer_cpu_offload=__record_default_optimizer_cpu_offload__, optimizer_offload_fraction=__record_default_optimizer_offload_fraction__, te_available=__record_default_te_available__, te_reason=__record_default_te_reason__, te_version=__record_default_te_version__, direct_settings=__record_default_direct_settings__, distributed_optimizer_turned_on=__record_default_distributed_optimizer_turned_on__):\n        __record_set__(self, 'model', model)\n        __record_set__(self, 'world_size', world_size)\n        __record_set__(self, 'gpu', gpu)\n        __record_set__(self, 'micro_batch_size', micro_batch_size)\n        __record_set__(self, 'global_batch_size', global_batch_size)\n        __record_set__(self, 'use_distributed_optimizer', use_distributed_optimizer)\n        __record_set__(self, 'megatron_ddp', megatron_ddp)\n        __record_set__(self, 'use_megatron_fsdp', use_megatron_fsdp)\n        __record_set__(self, 'num_distributed_optimizer_instances', num_distributed_optimizer_instances)\n        __record_set__(self, 'outer_dp_sharding_strategy', outer_dp_sharding_strategy)\n        __record_set__(self, 'num_buckets', num_buckets)\n        __record_set__(self, 'grad_reduce_in_fp32', grad_reduce_in_fp32)\n        __record_set__(self, 'fp8_param_gather', fp8_param_gather)\n        __record_set__(self, 'fp4_param_gather', fp4_param_gather)\n        __record_set__(self, 'optimizer_cpu_offload', optimizer_cpu_offload)\n        __record_set__(self, 'optimizer_offload_fraction', optimizer_offload_fraction)\n        __record_set__(self, 'te_available', te_available)\n        __record_set__(self, 'te_reason', te_reason)\n        __record_set__(self, 'te_version', te_version)\n        __record_set__(self, 'direct_settings', direct_settings)\n        __record_set__(self, 'distributed_optimizer_turned_on', distributed_optimizer_turned_on)\n    return __init__\n"] = __create_fn__

# megatron.bridge.training.job:ModelDescription
def __create_fn__(__record_set__, __record_factory__, __record_default_tensor_model_parallel_size__, __record_default_pipeline_model_parallel_size__, __record_default_virtual_pipeline_model_parallel_size__, __record_default_context_parallel_size__, __record_default_expert_model_parallel_size__, __record_default_expert_tensor_parallel_size__, __record_default_sequence_parallel__, __record_default_account_for_embedding_in_pipeline_split__, __record_default_account_for_loss_in_pipeline_split__, __record_default_pipeline_model_parallel_layout__, __record_default_num_layers_in_first_pipeline_stage__, __record_default_num_layers_in_last_pipeline_stage__, __record_default_num_layers__, __record_default_hidden_size__, __record_default_num_attention_heads__, __record_default_num_query_groups__, __record_default_kv_channels__, __record_default_ffn_hidden_size__, __record_default_seq_length__, __record_default_vocab_size__, __record_default_make_vocab_size_divisible_by__, __record_default_gated_linear_unit__, __record_default_activation_func__, __record_default_bias_activation_fusion__, __record_default_add_bias_linear__, __record_default_add_qkv_bias__, __record_default_normalization__, __record_default_position_embedding_type__, __record_default_share_embeddings_and_output_weights__, __record_default_hidden_dropout__, __record_default_attention_dropout__, __record_default_multi_latent_attention__, __record_default_q_lora_rank__, __record_default_kv_lora_rank__, __record_default_qk_head_dim__, __record_default_qk_pos_emb_head_dim__, __record_default_v_head_dim__, __record_default_window_size__, __record_default_window_attn_skip_freq__, __record_default_attention_output_gate__, __record_default_experimental_attention_variant__, __record_default_dsa_indexer_n_heads__, __record_default_dsa_indexer_head_dim__, __record_default_dsa_indexer_topk__, __record_default_o_lora_rank__, __record_default_o_groups__, __record_default_csa_compress_ratios__, __record_default_csa_window_size__, __record_default_enable_hyper_connections__, __record_default_num_residual_streams__, __record_default_hybrid_layer_pattern__, __record_default_mamba_state_dim__, __record_default_mamba_head_dim__, __record_default_mamba_num_groups__, __record_default_mamba_num_heads__, __record_default_bf16__, __record_default_fp16__, __record_default_fp8__, __record_default_fp8_recipe__, __record_default_fp4__, __record_default_fp4_recipe__, __record_default_fp8_dot_product_attention__, __record_default_first_last_layers_bf16__, __record_default_num_layers_at_start_in_bf16__, __record_default_num_layers_at_end_in_bf16__, __record_default_num_moe_experts__, __record_default_moe_router_topk__, __record_default_moe_router_score_function__, __record_default_moe_router_pre_softmax__, __record_default_moe_router_load_balancing_type__, __record_default_moe_router_enable_expert_bias__, __record_default_moe_router_topk_scaling_factor__, __record_default_moe_n_hash_layers__, __record_default_moe_grouped_gemm__, __record_default_moe_expert_capacity_factor__, __record_default_moe_pad_expert_input_to_capacity__, __record_default_moe_router_padding_for_quantization__, __record_default_moe_router_padding_for_fp8__, __record_default_moe_ffn_hidden_size__, __record_default_moe_shared_expert_intermediate_size__, __record_default_moe_layer_freq__, __record_default_moe_latent_size__, __record_default_moe_token_dispatcher_type__, __record_default_moe_flex_dispatcher_backend__, __record_default_moe_shared_expert_overlap__, __record_default_recompute_granularity__, __record_default_recompute_method__, __record_default_recompute_num_layers__, __record_default_recompute_modules__, __record_default_mtp_num_layers__, __record_default_mtp_use_repeated_layer__, __record_default_cpu_offloading__, __record_default_cpu_offloading_num_layers__, __record_default_cpu_offloading_activations__, __record_default_cpu_offloading_weights__, __record_default_fine_grained_activation_offloading__, __record_default_offload_modules__, __record_default_min_offloaded_tensor_size__, __record_default_activation_offload_fraction__, __record_default_fine_grained_offloading_max_inflight_offloads__, __record_default_use_transformer_engine_op_fuser__, __record_default_use_fused_weighted_squared_relu__, __record_default_cross_entropy_loss_fusion__, __record_default_cross_entropy_fusion_impl__, __record_default_gradient_accumulation_fusion__, __record_default_cuda_graph_impl__, __record_default_cuda_graph_modules__, __record_default_overlap_dispatch_backward_with_experts_wgrad__, __record_default_ep_overlap_early_attn_memory_release__, __record_default_overlap_p2p_comm_warmup_flush__):
    def __init__(self, *, tensor_model_parallel_size=__record_default_tensor_model_parallel_size__, pipeline_model_parallel_size=__record_default_pipeline_model_parallel_size__, virtual_pipeline_model_parallel_size=__record_default_virtual_pipeline_model_parallel_size__, context_parallel_size=__record_default_context_parallel_size__, expert_model_parallel_size=__record_default_expert_model_parallel_size__, expert_tensor_parallel_size=__record_default_expert_tensor_parallel_size__, sequence_parallel=__record_default_sequence_parallel__, account_for_embedding_in_pipeline_split=__record_default_account_for_embedding_in_pipeline_split__, account_for_loss_in_pipeline_split=__record_default_account_for_loss_in_pipeline_split__, pipeline_model_parallel_layout=__record_default_pipeline_model_parallel_layout__, num_layers_in_first_pipeline_stage=__record_default_num_layers_in_first_pipeline_stage__, num_layers_in_last_pipeline_stage=__record_default_num_layers_in_last_pipeline_stage__, num_layers=__record_default_num_layers__, hidden_size=__record_default_hidden_size__, num_attention_heads=__record_default_num_attention_heads__, num_query_groups=__record_default_num_query_groups__, kv_channels=__record_default_kv_channels__, ffn_hidden_size=__record_default_ffn_hidden_size__, seq_length=__record_default_seq_length__, vocab_size=__record_default_vocab_size__, make_vocab_size_divisible_by=__record_default_make_vocab_size_divisible_by__, gated_linear_unit=__record_default_gated_linear_unit__, activation_func=__record_default_activation_func__, bias_activation_fusion=__record_default_bias_activation_fusion__, add_bias_linear=__record_default_add_bias_linear__, add_qkv_bias=__record_default_add_qkv_bias__, normalization=__record_default_normalization__, position_embedding_type=__record_default_position_embedding_type__, share_embeddings_and_output_weights=__record_default_share_embeddings_and_output_weights__, hidden_dropout=__record_default_hidden_dropout__, attention_dropout=__record_default_attention_dropout__, multi_latent_attention=__record_default_multi_latent_attention__, q_lora_rank=__record_default_q_lora_rank__, kv_lora_rank=__record_default_kv_lora_rank__, qk_head_dim=__record_default_qk_head_dim__, qk_pos_emb_head_dim=__record_default_qk_pos_emb_head_dim__, v_head_dim=__record_default_v_head_dim__, window_size=__record_default_window_size__, window_attn_skip_freq=__record_default_window_attn_skip_freq__, attention_output_gate=__record_default_attention_output_gate__, experimental_attention_variant=__record_default_experimental_attention_variant__, dsa_indexer_n_heads=__record_default_dsa_indexer_n_heads__, dsa_indexer_head_dim=__record_default_dsa_indexer_head_dim__, dsa_indexer_topk=__record_default_dsa_indexer_topk__, o_lora_rank=__record_default_o_lora_rank__, o_groups=__record_default_o_groups__, csa_compress_ratios=__record_default_csa_compress_ratios__, csa_window_size=__record_default_csa_window_size__, enable_hyper_connections=__record_default_enable_hyper_connections__, num_residual_streams=__record_default_num_residual_streams__, hybrid_layer_pattern=__record_default_hybrid_layer_pattern__, mamba_state_dim=__record_default_mamba_state_dim__, mamba_head_dim=__record_default_mamba_head_dim__, mamba_num_groups=__record_default_mamba_num_groups__, mamba_num_heads=__record_default_mamba_num_heads__, bf16=__record_default_bf16__, fp16=__record_default_fp16__, fp8=__record_default_fp8__, fp8_recipe=__record_default_fp8_recipe__, fp4=__record_default_fp4__, fp4_recipe=__record_default_fp4_recipe__, fp8_dot_product_attention=__record_default_fp8_dot_product_attention__, first_last_layers_bf16=__record_default_first_last_layers_bf16__, num_layers_at_start_in_bf16=__record_default_num_layers_at_start_in_bf16__, num_layers_at_end_in_bf16=__record_default_num_layers_at_end_in_bf16__, num_moe_experts=__record_default_num_moe_experts__, moe_router_topk=__record_default_moe_router_topk__, moe_router_score_function=__record_default_moe_router_score_function__, moe_router_pre_softmax=__record_default_moe_router_pre_softmax__, moe_router_load_balancing_type=__record_default_moe_router_load_balancing_type__, moe_router_enable_expert_bias=__record_default_moe_router_enable_expert_bias__, moe_router_topk_scaling_factor=__record_default_moe_router_topk_scaling_factor__, moe_n_hash_layers=__record_default_moe_n_hash_layers__, moe_grouped_gemm=__record_default_moe_grouped_gemm__, moe_expert_capacity_factor=__record_default_moe_expert_capacity_factor__, moe_pad_expert_input_to_capacity=__record_default_moe_pad_expert_input_to_capacity__, moe_router_padding_for_quantization=__record_default_moe_router_padding_for_quantization__, moe_router_padding_for_fp8=__record_default_moe_router_padding_for_fp8__, moe_ffn_hidden_size=__record_default_moe_ffn_hidden_size__, moe_shared_expert_intermediate_size=__record_default_moe_shared_expert_intermediate_size__, moe_layer_freq=__record_default_moe_layer_freq__, moe_latent_size=__record_default_moe_latent_size__, moe_token_dispatcher_type=__record_default_moe_token_dispatcher_type__, moe_flex_dispatcher_backend=__record_default_moe_flex_dispatcher_backend__, moe_shared_expert_overlap=__record_default_moe_shared_expert_overlap__, recompute_granularity=__record_default_recompute_granularity__, recompute_method=__record_default_recompute_method__, recompute_num_layers=__record_default_recompute_num_layers__, recompute_modules=__record_default_recompute_modules__, mtp_num_layers=__record_default_mtp_num_layers__, mtp_use_repeated_layer=__record_default_mtp_use_repeated_layer__, cpu_offloading=__record_default_cpu_offloading__, cpu_offloading_num_layers=__record_default_cpu_offloading_num_layers__, cpu_offloading_activations=__record_default_cpu_offloading_activations__, cpu_offloading_weights=__record_default_cpu_offloading_weights__, fine_grained_activation_offloading=__record_default_fine_grained_activation_offloading__, offload_modules=__record_default_offload_modules__, min_offloaded_tensor_size=__record_default_min_offloaded_tensor_size__, activation_offload_fraction=__record_default_activation_offload_fraction__, fine_grained_offloading_max_inflight_offloads=__record_default_fine_grained_offloading_max_inflight_offloads__, use_transformer_engine_op_fuser=__record_default_use_transformer_engine_op_fuser__, use_fused_weighted_squared_relu=__record_default_use_fused_weighted_squared_relu__, cross_entropy_loss_fusion=__record_default_cross_entropy_loss_fusion__, cross_entropy_fusion_impl=__record_default_cross_entropy_fusion_impl__, gradient_accumulation_fusion=__record_default_gradient_accumulation_fusion__, cuda_graph_impl=__record_default_cuda_graph_impl__, cuda_graph_modules=__record_default_cuda_graph_modules__, overlap_dispatch_backward_with_experts_wgrad=__record_default_overlap_dispatch_backward_with_experts_wgrad__, ep_overlap_early_attn_memory_release=__record_default_ep_overlap_early_attn_memory_release__, overlap_p2p_comm_warmup_flush=__record_default_overlap_p2p_comm_warmup_flush__):
        __record_set__(self, 'tensor_model_parallel_size', tensor_model_parallel_size)
        __record_set__(self, 'pipeline_model_parallel_size', pipeline_model_parallel_size)
        __record_set__(self, 'virtual_pipeline_model_parallel_size', virtual_pipeline_model_parallel_size)
        __record_set__(self, 'context_parallel_size', context_parallel_size)
        __record_set__(self, 'expert_model_parallel_size', expert_model_parallel_size)
        __record_set__(self, 'expert_tensor_parallel_size', expert_tensor_parallel_size)
        __record_set__(self, 'sequence_parallel', sequence_parallel)
        __record_set__(self, 'account_for_embedding_in_pipeline_split', account_for_embedding_in_pipeline_split)
        __record_set__(self, 'account_for_loss_in_pipeline_split', account_for_loss_in_pipeline_split)
        __record_set__(self, 'pipeline_model_parallel_layout', pipeline_model_parallel_layout)
        __record_set__(self, 'num_layers_in_first_pipeline_stage', num_layers_in_first_pipeline_stage)
        __record_set__(self, 'num_layers_in_last_pipeline_stage', num_layers_in_last_pipeline_stage)
        __record_set__(self, 'num_layers', num_layers)
        __record_set__(self, 'hidden_size', hidden_size)
        __record_set__(self, 'num_attention_heads', num_attention_heads)
        __record_set__(self, 'num_query_groups', num_query_groups)
        __record_set__(self, 'kv_channels', kv_channels)
        __record_set__(self, 'ffn_hidden_size', ffn_hidden_size)
        __record_set__(self, 'seq_length', seq_length)
        __record_set__(self, 'vocab_size', vocab_size)
        __record_set__(self, 'make_vocab_size_divisible_by', make_vocab_size_divisible_by)
        __record_set__(self, 'gated_linear_unit', gated_linear_unit)
        __record_set__(self, 'activation_func', activation_func)
        __record_set__(self, 'bias_activation_fusion', bias_activation_fusion)
        __record_set__(self, 'add_bias_linear', add_bias_linear)
        __record_set__(self, 'add_qkv_bias', add_qkv_bias)
        __record_set__(self, 'normalization', normalization)
        __record_set__(self, 'position_embedding_type', position_embedding_type)
        __record_set__(self, 'share_embeddings_and_output_weights', share_embeddings_and_output_weights)
        __record_set__(self, 'hidden_dropout', hidden_dropout)
        __record_set__(self, 'attention_dropout', attention_dropout)
        __record_set__(self, 'multi_latent_attention', multi_latent_attention)
        __record_set__(self, 'q_lora_rank', q_lora_rank)
        __record_set__(self, 'kv_lora_rank', kv_lora_rank)
        __record_set__(self, 'qk_head_dim', qk_head_dim)
        __record_set__(self, 'qk_pos_emb_head_dim', qk_pos_emb_head_dim)
        __record_set__(self, 'v_head_dim', v_head_dim)
        __record_set__(self, 'window_size', window_size)
        __record_set__(self, 'window_attn_skip_freq', window_attn_skip_freq)
        __record_set__(self, 'attention_output_gate', attention_output_gate)
        __record_set__(self, 'experimental_attention_variant', experimental_attention_variant)
        __record_set__(self, 'dsa_indexer_n_heads', dsa_indexer_n_heads)
        __record_set__(self, 'dsa_indexer_head_dim', dsa_indexer_head_dim)
        __record_set__(self, 'dsa_indexer_topk', dsa_indexer_topk)
        __record_set__(self, 'o_lora_rank', o_lora_rank)
        __record_set__(self, 'o_groups', o_groups)
        __record_set__(self, 'csa_compress_ratios', csa_compress_ratios)
        __record_set__(self, 'csa_window_size', csa_window_size)
        __record_set__(self, 'enable_hyper_connections', enable_hyper_connections)
        __record_set__(self, 'num_residual_streams', num_residual_streams)
        __record_set__(self, 'hybrid_layer_pattern', hybrid_layer_pattern)
        __record_set__(self, 'mamba_state_dim', mamba_state_dim)
        __record_set__(self, 'mamba_head_dim', mamba_head_dim)
        __record_set__(self, 'mamba_num_groups', mamba_num_groups)
        __record_set__(self, 'mamba_num_heads', mamba_num_heads)
        __record_set__(self, 'bf16', bf16)
        __record_set__(self, 'fp16', fp16)
        __record_set__(self, 'fp8', fp8)
        __record_set__(self, 'fp8_recipe', fp8_recipe)
        __record_set__(self, 'fp4', fp4)
        __record_set__(self, 'fp4_recipe', fp4_recipe)
        __record_set__(self, 'fp8_dot_product_attention', fp8_dot_product_attention)
        __record_set__(self, 'first_last_layers_bf16', first_last_layers_bf16)
        __record_set__(self, 'num_layers_at_start_in_bf16', num_layers_at_start_in_bf16)
        __record_set__(self, 'num_layers_at_end_in_bf16', num_layers_at_end_in_bf16)
        __record_set__(self, 'num_moe_experts', num_moe_experts)
        __record_set__(self, 'moe_router_topk', moe_router_topk)
        __record_set__(self, 'moe_router_score_function', moe_router_score_function)
        __record_set__(self, 'moe_router_pre_softmax', moe_router_pre_softmax)
        __record_set__(self, 'moe_router_load_balancing_type', moe_router_load_balancing_type)
        __record_set__(self, 'moe_router_enable_expert_bias', moe_router_enable_expert_bias)
        __record_set__(self, 'moe_router_topk_scaling_factor', moe_router_topk_scaling_factor)
        __record_set__(self, 'moe_n_hash_layers', moe_n_hash_layers)
        __record_set__(self, 'moe_grouped_gemm', moe_grouped_gemm)
        __record_set__(self, 'moe_expert_capacity_factor', moe_expert_capacity_factor)
        __record_set__(self, 'moe_pad_expert_input_to_capacity', moe_pad_expert_input_to_capacity)
        __record_set__(self, 'moe_router_padding_for_quantization', moe_router_padding_for_quantization)
        __record_set__(self, 'moe_router_padding_for_fp8', moe_router_padding_for_fp8)
        __record_set__(self, 'moe_ffn_hidden_size', moe_ffn_hidden_size)
        __record_set__(self, 'moe_shared_expert_intermediate_size', moe_shared_expert_intermediate_size)
        __record_set__(self, 'moe_layer_freq', moe_layer_freq)
        __record_set__(self, 'moe_latent_size', moe_latent_size)
        __record_set__(self, 'moe_token_dispatcher_type', moe_token_dispatcher_type)
        __record_set__(self, 'moe_flex_dispatcher_backend', moe_flex_dispatcher_backend)
        __record_set__(self, 'moe_shared_expert_overlap', moe_shared_expert_overlap)
        __record_set__(self, 'recompute_granularity', recompute_granularity)
        __record_set__(self, 'recompute_method', recompute_method)
        __record_set__(self, 'recompute_num_layers', recompute_num_layers)
        __record_set__(self, 'recompute_modules', recompute_modules)
        __record_set__(self, 'mtp_num_layers', mtp_num_layers)
        __record_set__(self, 'mtp_use_repeated_layer', mtp_use_repeated_layer)
        __record_set__(self, 'cpu_offloading', cpu_offloading)
        __record_set__(self, 'cpu_offloading_num_layers', cpu_offloading_num_layers)
        __record_set__(self, 'cpu_offloading_activations', cpu_offloading_activations)
        __record_set__(self, 'cpu_offloading_weights', cpu_offloading_weights)
        __record_set__(self, 'fine_grained_activation_offloading', fine_grained_activation_offloading)
        __record_set__(self, 'offload_modules', offload_modules)
        __record_set__(self, 'min_offloaded_tensor_size', min_offloaded_tensor_size)
        __record_set__(self, 'activation_offload_fraction', activation_offload_fraction)
        __record_set__(self, 'fine_grained_offloading_max_inflight_offloads', fine_grained_offloading_max_inflight_offloads)
        __record_set__(self, 'use_transformer_engine_op_fuser', use_transformer_engine_op_fuser)
        __record_set__(self, 'use_fused_weighted_squared_relu', use_fused_weighted_squared_relu)
        __record_set__(self, 'cross_entropy_loss_fusion', cross_entropy_loss_fusion)
        __record_set__(self, 'cross_entropy_fusion_impl', cross_entropy_fusion_impl)
        __record_set__(self, 'gradient_accumulation_fusion', gradient_accumulation_fusion)
        __record_set__(self, 'cuda_graph_impl', cuda_graph_impl)
        __record_set__(self, 'cuda_graph_modules', cuda_graph_modules)
        __record_set__(self, 'overlap_dispatch_backward_with_experts_wgrad', overlap_dispatch_backward_with_experts_wgrad)
        __record_set__(self, 'ep_overlap_early_attn_memory_release', ep_overlap_early_attn_memory_release)
        __record_set__(self, 'overlap_p2p_comm_warmup_flush', overlap_p2p_comm_warmup_flush)
    return __init__
FACTORIES["def __create_fn__(__record_set__, __record_factory__, __record_default_tensor_model_parallel_size__, __record_default_pipeline_model_parallel_size__, __record_default_virtual_pipeline_model_parallel_size__, __record_default_context_parallel_size__, __record_default_expert_model_parallel_size__, __record_default_expert_tensor_parallel_size__, __record_default_sequence_parallel__, __record_default_account_for_embedding_in_pipeline_split__, __record_default_account_for_loss_in_pipeline_split__, __record_default_pipeline_model_parallel_layout__, __record_default_num_layers_in_first_pipeline_stage__, __record_default_num_layers_in_last_pipeline_stage__, __record_default_num_layers__, __record_default_hidden_size__, __record_default_num_attention_heads__, __record_default_num_query_groups__, __record_default_kv_channels__, __record_default_ffn_hidden_size__, __record_default_seq_length__, __record_default_vocab_size__, __record_default_make_vocab_size_divisible_by__, __record_default_gated_linear_unit__, __record_default_activation_func__, __record_default_bias_activation_fusion__, __record_default_add_bias_linear__, __record_default_add_qkv_bias__, __record_default_normalization__, __record_default_position_embedding_type__, __record_default_share_embeddings_and_output_weights__, __record_default_hidden_dropout__, __record_default_attention_dropout__, __record_default_multi_latent_attention__, __record_default_q_lora_rank__, __record_default_kv_lora_rank__, __record_default_qk_head_dim__, __record_default_qk_pos_emb_head_dim__, __record_default_v_head_dim__, __record_default_window_size__, __record_default_window_attn_skip_freq__, __record_default_attention_output_gate__, __record_default_experimental_attention_variant__, __record_default_dsa_indexer_n_heads__, __record_default_dsa_indexer_head_dim__, __record_default_dsa_indexer_topk__, __record_default_o_lora_rank__, __record_default_o_groups__, __record_default_csa_compress_ratios__, __record_default_csa_window_size__, __record_default_enable_hyper_connections__, __record_default_num_residual_streams__, __record_default_hybrid_layer_pattern__, __record_default_mamba_state_dim__, __record_default_mamba_head_dim__, __record_default_mamba_num_groups__, __record_default_mamba_num_heads__, __record_default_bf16__, __record_default_fp16__, __record_default_fp8__, __record_default_fp8_recipe__, __record_default_fp4__, __record_default_fp4_recipe__, __record_default_fp8_dot_product_attention__, __record_default_first_last_layers_bf16__, __record_default_num_layers_at_start_in_bf16__, __record_default_num_layers_at_end_in_bf16__, __record_default_num_moe_experts__, __record_default_moe_router_topk__, __record_default_moe_router_score_function__, __record_default_moe_router_pre_softmax__, __record_default_moe_router_load_balancing_type__, __record_default_moe_router_enable_expert_bias__, __record_default_moe_router_topk_scaling_factor__, __record_default_moe_n_hash_layers__, __record_default_moe_grouped_gemm__, __record_default_moe_expert_capacity_factor__, __record_default_moe_pad_expert_input_to_capacity__, __record_default_moe_router_padding_for_quantization__, __record_default_moe_router_padding_for_fp8__, __record_default_moe_ffn_hidden_size__, __record_default_moe_shared_expert_intermediate_size__, __record_default_moe_layer_freq__, __record_default_moe_latent_size__, __record_default_moe_token_dispatcher_type__, __record_default_moe_flex_dispatcher_backend__, __record_default_moe_shared_expert_overlap__, __record_default_recompute_granularity__, __record_default_recompute_method__, __record_default_recompute_num_layers__, __record_default_recompute_modules__, __record_default_mtp_num_layers__, __record_default_mtp_use_repeated_layer__, __record_default_cpu_offloading__, __record_default_cpu_offloading_num_layers__, __record_default_cpu_offloading_activations__, __record_default_cpu_offloading_weights__, __record_default_fine_grained_activation_offloading__, __record_default_offload_modules__, __record_default_min_offloaded_tensor_size__, __record_default_activation_offload_fraction__, __record_default_fine_grained_offloading_max_inflight_offloads__, __record_default_use_transformer_engine_op_fuser__, __record_default_use_fused_weighted_squared_relu__, __record_default_cross_entropy_loss_fusion__, __record_default_cross_entropy_fusion_impl__, __record_default_gradient_accumulation_fusion__, __record_default_cuda_graph_impl__, __record_default_cuda_graph_modules__, __record_default_overlap_dispatch_backward_with_experts_wgrad__, __record_default_ep_overlap_early_attn_memory_release__, __record_default_overlap_p2p_comm_warmup_flush__):\n    def __init__(self, *, tensor_model_parallel_size=__record_default_tensor_model_parallel_size__, pipeline_model_parallel_size=__record_default_pipeline_model_parallel_size__, virtual_pipeline_model_parallel_size=__record_default_virtual_pipeline_model_parallel_size__, context_parallel_size=__record_default_context_parallel_size__, expert_model_parallel_size=__record_default_expert_model_parallel_size__, expert_tensor_parallel_size=__record_default_expert_tensor_parallel_size__, sequence_parallel=__record_default_sequence_parallel__, account_for_embedding_in_pipeline_split=__record_default_account_for_embedding_in_pipeline_split__, account_for_loss_in_pipeline_split=__record_default_account_for_loss_in_pipeline_split__, pipeline_model_parallel_layout=__record_default_pipeline_model_parallel_layout__, num_layers_in_first_pipeline_stage=__record_default_num_layers_in_first_pipeline_stage__, num_layers_in_last_pipeline_stage=__record_default_num_layers_in_last_pipeline_stage__, num_layers=__record_default_num_layers__, hidden_size=__record_default_hidden_size__, num_attention_heads=__record_default_num_attention_heads__, num_query_groups=__record_default_num_query_groups__, kv_channels=__record_default_kv_channels__, ffn_hidden_size=__record_default_ffn_hidden_size__, seq_length=__record_default_seq_length__, vocab_size=__record_default_vocab_size__, make_vocab_size_divisible_by=__record_default_make_vocab_size_divisible_by__, gated_linear_unit=__record_default_gated_linear_unit__, activation_func=__record_default_activation_func__, bias_activation_fusion=__record_default_bias_activation_fusion__, add_bias_linear=__record_default_add_bias_linear__, add_qkv_bias=__record_default_add_qkv_bias__, normalization=__record_default_normalization__, position_embedding_type=__record_default_position_embedding_type__, share_embeddings_and_output_weights=__record_default_share_embeddings_and_output_weights__, hidden_dropout=__record_default_hidden_dropout__, attention_dropout=__record_default_attention_dropout__, multi_latent_attention=__record_default_multi_latent_attention__, q_lora_rank=__record_default_q_lora_rank__, kv_lora_rank=__record_default_kv_lora_rank__, qk_head_dim=__record_default_qk_head_dim__, qk_pos_emb_head_dim=__record_default_qk_pos_emb_head_dim__, v_head_dim=__record_default_v_head_dim__, window_size=__record_default_window_size__, window_attn_skip_freq=__record_default_window_attn_skip_freq__, attention_output_gate=__record_default_attention_output_gate__, experimental_attention_variant=__record_default_experimental_attention_variant__, dsa_indexer_n_heads=__record_default_dsa_indexer_n_heads__, dsa_indexer_head_dim=__record_default_dsa_indexer_head_dim__, dsa_indexer_topk=__record_default_dsa_indexer_topk__, o_lora_rank=__record_default_o_lora_rank__, o_groups=__record_default_o_groups__, csa_compress_ratios=__record_default_csa_compress_ratios__, csa_window_size=__record_default_csa_window_size__, enable_hyper_connections=__record_default_enable_hyper_connections__, num_residual_streams=__record_default_num_residual_streams__, hybrid_layer_pattern=__record_default_hybrid_layer_pattern__, mamba_state_dim=__record_default_mamba_state_dim__, mamba_head_dim=__record_default_mamba_head_dim__, mamba_num_groups=__record_default_mamba_num_groups__, mamba_num_heads=__record_default_mamba_num_heads__, bf16=__record_default_bf16__, fp16=__record_default_fp16__, fp8=__record_default_fp8__, fp8_recipe=__record_default_fp8_recipe__, fp4=__record_default_fp4__, fp4_recipe=__record_default_fp4_recipe__, fp8_dot_product_attention=__record_default_fp8_dot_product_attention__, first_last_layers_bf16=__record_default_first_last_layers_bf16__, num_layers_at_start_in_bf16=__record_default_num_layers_at_start_in_bf16__, num_layers_at_end_in_bf16=__record_default_num_layers_at_end_in_bf16__, num_moe_experts=__record_default_num_moe_experts__, moe_router_topk=__record_default_moe_router_topk__, moe_router_score_function=__record_default_moe_router_score_function__, moe_router_pre_softmax=__record_default_moe_router_pre_softmax__, moe_router_load_balancing_type=__record_default_moe_router_load_balancing_type__, moe_router_enable_expert_bias=__record_default_moe_router_enable_expert_bias__, moe_router_topk_scaling_factor=__record_default_moe_router_topk_scaling_factor__, moe_n_hash_layers=__record_default_moe_n_hash_layers__, moe_grouped_gemm=__record_default_moe_grouped_gemm__, moe_expert_capacity_factor=__record_default_moe_expert_capacity_factor__, moe_pad_expert_input_to_capacity=__record_default_moe_pad_expert_input_to_capacity__, moe_router_padding_for_quantization=__record_default_moe_router_padding_for_quantization__, moe_router_padding_for_fp8=__record_default_moe_router_padding_for_fp8__, moe_ffn_hidden_size=__record_default_moe_ffn_hidden_size__, moe_shared_expert_intermediate_size=__record_default_moe_shared_expert_intermediate_size__, moe_layer_freq=__record_default_moe_layer_freq__, moe_latent_size=__record_default_moe_latent_size__, moe_token_dispatcher_type=__record_default_moe_token_dispatcher_type__, moe_flex_dispatcher_backend=__record_default_moe_flex_dispatcher_backend__, moe_shared_expert_overlap=__record_default_moe_shared_expert_overlap__, recompute_granularity=__record_default_recompute_granularity__, recompute_method=__record_default_recompute_method__, recompute_num_layers=__record_default_recompute_num_layers__, recompute_modules=__record_default_recompute_modules__, mtp_num_layers=__record_default_mtp_num_layers__, mtp_use_repeated_layer=__record_default_mtp_use_repeated_layer__, cpu_offloading=__record_default_cpu_offloading__, cpu_offloading_num_layers=__record_default_cpu_offloading_num_layers__, cpu_offloading_activations=__record_default_cpu_offloading_activations__, cpu_offloading_weights=__record_default_cpu_offloading_weights__, fine_grained_activation_offloading=__record_default_fine_grained_activation_offloading__, offload_modules=__record_default_offload_modules__, min_offloaded_tensor_size=__record_default_min_offloaded_tensor_size__, activation_offload_fraction=__record_default_activation_offload_fraction__, fine_grained_offloading_max_inflight_offloads=__record_default_fine_grained_offloading_max_inflight_offloads__, use_transformer_engine_op_fuser=__record_default_use_transformer_engine_op_fuser__, use_fused_weighted_squared_relu=__record_default_use_fused_weighted_squared_relu__, cross_entropy_loss_fusion=__record_default_cross_entropy_loss_fusion__, cross_entropy_fusion_impl=__record_default_cross_entropy_fusion_impl__, gradient_accumulation_fusion=__record_default_gradient_accumulation_fusion__, cuda_graph_impl=__record_default_cuda_graph_impl__, cuda_graph_modules=__record_default_cuda_graph_modules__, overlap_dispatch_backward_with_experts_wgrad=__record_default_overlap_dispatch_backward_with_experts_wgrad__, ep_overlap_early_attn_memory_release=__record_default_ep_overlap_early_attn_memory_release__, overlap_p2p_comm_warmup_flush=__record_default_overlap_p2p_comm_warmup_flush__):\n        __record_set__(self, 'tensor_model_parallel_size', tensor_model_parallel_size)\n        __record_set__(self, 'pipeline_model_parallel_size', pipeline_model_parallel_size)\n        __record_set__(self, 'virtual_pipeline_model_parallel_size', virtual_pipeline_model_parallel_size)\n        __record_set__(self, 'context_parallel_size', context_parallel_size)\n        __record_set__(self, 'expert_model_parallel_size', expert_model_parallel_size)\n        __record_set__(self, 'expert_tensor_parallel_size', expert_tensor_parallel_size)\n        __record_set__(self, 'sequence_parallel', sequence_parallel)\n        __record_set__(self, 'account_for_embedding_in_pipeline_split', account_for_embedding_in_pipeline_split)\n        __record_set__(self, 'account_for_loss_in_pipeline_split', account_for_loss_in_pipeline_split)\n        __record_set__(self, 'pipeline_model_parallel_layout', pipeline_model_parallel_layout)\n        __record_set__(self, 'num_layers_in_first_pipeline_stage', num_layers_in_first_pipeline_stage)\n        __record_set__(self, 'num_layers_in_last_pipeline_stage', num_layers_in_last_pipeline_stage)\n        __record_set__(self, 'num_layers', num_layers)\n        __record_set__(self, 'hidden_size', hidden_size)\n        __record_set__(self, 'num_attention_heads', num_attention_heads)\n        __record_set__(self, 'num_query_groups', num_query_groups)\n        __record_set__(self, 'kv_channels', kv_channels)\n        __record_set__(self, 'ffn_hidden_size', ffn_hidden_size)\n        __record_set__(self, 'seq_length', seq_length)\n        __record_set__(self, 'vocab_size', vocab_size)\n        __record_set__(self, 'make_vocab_size_divisible_by', make_vocab_size_divisible_by)\n        __record_set__(self, 'gated_linear_unit', gated_linear_unit)\n        __record_set__(self, 'activation_func', activation_func)\n        __record_set__(self, 'bias_activation_fusion', bias_activation_fusion)\n        __record_set__(self, 'add_bias_linear', add_bias_linear)\n        __record_set__(self, 'add_qkv_bias', add_qkv_bias)\n        __record_set__(self, 'normalization', normalization)\n        __record_set__(self, 'position_embedding_type', position_embedding_type)\n        __record_set__(self, 'share_embeddings_and_output_weights', share_embeddings_and_output_weights)\n        __record_set__(self, 'hidden_dropout', hidden_dropout)\n        __record_set__(self, 'attention_dropout', attention_dropout)\n        __record_set__(self, 'multi_latent_attention', multi_latent_attention)\n        __record_set__(self, 'q_lora_rank', q_lora_rank)\n        __record_set__(self, 'kv_lora_rank', kv_lora_rank)\n        __record_set__(self, 'qk_head_dim', qk_head_dim)\n        __record_set__(self, 'qk_pos_emb_head_dim', qk_pos_emb_head_dim)\n        __record_set__(self, 'v_head_dim', v_head_dim)\n        __record_set__(self, 'window_size', window_size)\n        __record_set__(self, 'window_attn_skip_freq', window_attn_skip_freq)\n        __record_set__(self, 'attention_output_gate', attention_output_gate)\n        __record_set__(self, 'experimental_attention_variant', experimental_attention_variant)\n        __record_set__(self, 'dsa_indexer_n_heads', dsa_indexer_n_heads)\n        __record_set__(self, 'dsa_indexer_head_dim', dsa_indexer_head_dim)\n        __record_set__(self, 'dsa_indexer_topk', dsa_indexer_topk)\n        __record_set__(self, 'o_lora_rank', o_lora_rank)\n        __record_set__(self, 'o_groups', o_groups)\n        __record_set__(self, 'csa_compress_ratios', csa_compress_ratios)\n        __record_set__(self, 'csa_window_size', csa_window_size)\n        __record_set__(self, 'enable_hyper_connections', enable_hyper_connections)\n        __record_set__(self, 'num_residual_streams', num_residual_streams)\n        __record_set__(self, 'hybrid_layer_pattern', hybrid_layer_pattern)\n        __record_set__(self, 'mamba_state_dim', mamba_state_dim)\n        __record_set__(self, 'mamba_head_dim', mamba_head_dim)\n        __record_set__(self, 'mamba_num_groups', mamba_num_groups)\n        __record_set__(self, 'mamba_num_heads', mamba_num_heads)\n        __record_set__(self, 'bf16', bf16)\n        __record_set__(self, 'fp16', fp16)\n        __record_set__(self, 'fp8', fp8)\n        __record_set__(self, 'fp8_recipe', fp8_recipe)\n        __record_set__(self, 'fp4', fp4)\n        __record_set__(self, 'fp4_recipe', fp4_recipe)\n        __record_set__(self, 'fp8_dot_product_attention', fp8_dot_product_attention)\n        __record_set__(self, 'first_last_layers_bf16', first_last_layers_bf16)\n        __record_set__(self, 'num_layers_at_start_in_bf16', num_layers_at_start_in_bf16)\n        __record_set__(self, 'num_layers_at_end_in_bf16', num_layers_at_end_in_bf16)\n        __record_set__(self, 'num_moe_experts', num_moe_experts)\n        __record_set__(self, 'moe_router_topk', moe_router_topk)\n        __record_set__(self, 'moe_router_score_function', moe_router_score_function)\n        __record_set__(self, 'moe_router_pre_softmax', moe_router_pre_softmax)\n        __record_set__(self, 'moe_router_load_balancing_type', moe_router_load_balancing_type)\n        __record_set__(self, 'moe_router_enable_expert_bias', moe_router_enable_expert_bias)\n        __record_set__(self, 'moe_router_topk_scaling_factor', moe_router_topk_scaling_factor)\n        __record_set__(self, 'moe_n_hash_layers', moe_n_hash_layers)\n        __record_set__(self, 'moe_grouped_gemm', moe_grouped_gemm)\n        __record_set__(self, 'moe_expert_capacity_factor', moe_expert_capacity_factor)\n        __record_set__(self, 'moe_pad_expert_input_to_capacity', moe_pad_expert_input_to_capacity)\n        __record_set__(self, 'moe_router_padding_for_quantization', moe_router_padding_for_quantization)\n        __record_set__(self, 'moe_router_padding_for_fp8', moe_router_padding_for_fp8)\n        __record_set__(self, 'moe_ffn_hidden_size', moe_ffn_hidden_size)\n        __record_set__(self, 'moe_shared_expert_intermediate_size', moe_shared_expert_intermediate_size)\n        __record_set__(self, 'moe_layer_freq', moe_layer_freq)\n        __record_set__(self, 'moe_latent_size', moe_latent_size)\n        __record_set__(self, 'moe_token_dispatcher_type', moe_token_dispatcher_type)\n        __record_set__(self, 'moe_flex_dispatcher_backend', moe_flex_dispatcher_backend)\n        __record_set__(self, 'moe_shared_expert_overlap', moe_shared_expert_overlap)\n        __record_set__(self, 'recompute_granularity', recompute_granularity)\n        __record_set__(self, 'recompute_method', recompute_method)\n        __record_set__(self, 'recompute_num_layers', recompute_num_layers)\n        __record_set__(self, 'recompute_modules', recompute_modules)\n        __record_set__(self, 'mtp_num_layers', mtp_num_layers)\n        __record_set__(self, 'mtp_use_repeated_layer', mtp_use_repeated_layer)\n        __record_set__(self, 'cpu_offloading', cpu_offloading)\n        __record_set__(self, 'cpu_offloading_num_layers', cpu_offloading_num_layers)\n        __record_set__(self, 'cpu_offloading_activations', cpu_offloading_activations)\n        __record_set__(self, 'cpu_offloading_weights', cpu_offloading_weights)\n        __record_set__(self, 'fine_grained_activation_offloading', fine_grained_activation_offloading)\n        __record_set__(self, 'offload_modules', offload_modules)\n        __record_set__(self, 'min_offloaded_tensor_size', min_offloaded_tensor_size)\n        __record_set__(self, 'activation_offload_fraction', activation_offload_fraction)\n        __record_set__(self, 'fine_grained_offloading_max_inflight_offloads', fine_grained_offloading_max_inflight_offloads)\n        __record_set__(self, 'use_transformer_engine_op_fuser', use_transformer_engine_op_fuser)\n        __record_set__(self, 'use_fused_weighted_squared_relu', use_fused_weighted_squared_relu)\n        __record_set__(self, 'cross_entropy_loss_fusion', cross_entropy_loss_fusion)\n        __record_set__(self, 'cross_entropy_fusion_impl', cross_entropy_fusion_impl)\n        __record_set__(self, 'gradient_accumulation_fusion', gradient_accumulation_fusion)\n        __record_set__(self, 'cuda_graph_impl', cuda_graph_impl)\n        __record_set__(self, 'cuda_graph_modules', cuda_graph_modules)\n        __record_set__(self, 'overlap_dispatch_backward_with_experts_wgrad', overlap_dispatch_backward_with_experts_wgrad)\n        __record_set__(self, 'ep_overlap_early_attn_memory_release', ep_overlap_early_attn_memory_release)\n        __record_set__(self, 'overlap_p2p_comm_warmup_flush', overlap_p2p_comm_warmup_flush)\n    return __init__\n"] = __create_fn__

# megatron.bridge.training.launch_env:LaunchEnvEntry
def __create_fn__(__record_set__, __record_factory__):
    def __init__(self, *, name, value, reason):
        __record_set__(self, 'name', name)
        __record_set__(self, 'value', value)
        __record_set__(self, 'reason', reason)
    return __init__
FACTORIES["def __create_fn__(__record_set__, __record_factory__):\n    def __init__(self, *, name, value, reason):\n        __record_set__(self, 'name', name)\n        __record_set__(self, 'value', value)\n        __record_set__(self, 'reason', reason)\n    return __init__\n"] = __create_fn__

# megatron.bridge.training.launch_env:LaunchEnvPlan
def __create_fn__(__record_set__, __record_factory__):
    def __init__(self, *, entries):
        __record_set__(self, 'entries', entries)
    return __init__
FACTORIES["def __create_fn__(__record_set__, __record_factory__):\n    def __init__(self, *, entries):\n        __record_set__(self, 'entries', entries)\n    return __init__\n"] = __create_fn__

# megatron.bridge.training.parallel_layout:ParallelSizes
def __create_fn__(__record_set__, __record_factory__):
    def __init__(self, *, data_parallel_size, expert_tensor_parallel_size, expert_data_parallel_size):
        __record_set__(self, 'data_parallel_size', data_parallel_size)
        __record_set__(self, 'expert_tensor_parallel_size', expert_tensor_parallel_size)
        __record_set__(self, 'expert_data_parallel_size', expert_data_parallel_size)
    return __init__
FACTORIES["def __create_fn__(__record_set__, __record_factory__):\n    def __init__(self, *, data_parallel_size, expert_tensor_parallel_size, expert_data_parallel_size):\n        __record_set__(self, 'data_parallel_size', data_parallel_size)\n        __record_set__(self, 'expert_tensor_parallel_size', expert_tensor_parallel_size)\n        __record_set__(self, 'expert_data_parallel_size', expert_data_parallel_size)\n    return __init__\n"] = __create_fn__

# megatron.bridge.training.pipeline_layout:PipelineSplit
def __create_fn__(__record_set__, __record_factory__):
    def __init__(self, *, virtual_pipeline_model_parallel_size, layers):
        __record_set__(self, 'virtual_pipeline_model_parallel_size', virtual_pipeline_model_parallel_size)
        __record_set__(self, 'layers', layers)
    return __init__
FACTORIES["def __create_fn__(__record_set__, __record_factory__):\n    def __init__(self, *, virtual_pipeline_model_parallel_size, layers):\n        __record_set__(self, 'virtual_pipeline_model_parallel_size', virtual_pipeline_model_parallel_size)\n        __record_set__(self, 'layers', layers)\n    return __init__\n"] = __create_fn__

# megatron.bridge.training.precisions:PrecisionSetting
def __create_fn__(__record_set__, __record_factory__, __record_default_min_compute_capability__, __record_default_below_compute_capability__, __record_default_quantized_params__):
    def __init__(self, mixed_precision, model, grad_reduce_in_fp32, title, preset_family, tensor_cores, min_compute_capability=__record_default_min_compute_capability__, below_compute_capability=__record_default_below_compute_capability__, quantized_params=__record_default_quantized_params__):
        __record_set__(self, 'mixed_precision', mixed_precision)
        __record_set__(self, 'model', model)
        __record_set__(self, 'grad_reduce_in_fp32', grad_reduce_in_fp32)
        __record_set__(self, 'title', title)
        __record_set__(self, 'preset_family', preset_family)
        __record_set__(self, 'tensor_cores', tensor_cores)
        __record_set__(self, 'min_compute_capability', min_compute_capability)
        __record_set__(self, 'below_compute_capability', below_compute_capability)
        __record_set__(self, 'quantized_params', quantized_params)
    return __init__
FACTORIES["def __create_fn__(__record_set__, __record_factory__, __record_default_min_compute_capability__, __record_default_below_compute_capability__, __record_default_quantized_params__):\n    def __init__(self, mixed_precision, model, grad_reduce_in_fp32, title, preset_family, tensor_cores, min_compute_capability=__record_default_min_compute_capability__, below_compute_capability=__record_default_below_compute_capability__, quantized_params=__record_default_quantized_params__):\n        __record_set__(self, 'mixed_precision', mixed_precision)\n        __record_set__(self, 'model', model)\n        __record_set__(self, 'grad_reduce_in_fp32', grad_reduce_in_fp32)\n        __record_set__(self, 'title', title)\n        __record_set__(self, 'preset_family', preset_family)\n        __record_set__(self, 'tensor_cores', tensor_cores)\n        __record_set__(self, 'min_compute_capability', min_compute_capability)\n        __record_set__(self, 'below_compute_capability', below_compute_capability)\n        __record_set__(self, 'quantized_params', quantized_params)\n    return __init__\n"] = __create_fn__

# megatron.bridge.training.resolve:ResolvedConfig
def __create_fn__(__record_set__, __record_factory__, __record_default_derived_env__, __record_default__staged__, __record_make_env_vars__):
    def __init__(self, *, job, plan, data_parallel_size, mixed_precision, env_vars=__record_factory__, derived_env=__record_default_derived_env__, _staged=__record_default__staged__):
        __record_set__(self, 'job', job)
        __record_set__(self, 'plan', plan)
        __record_set__(self, 'data_parallel_size', data_parallel_size)
        __record_set__(self, 'mixed_precision', mixed_precision)
        __record_set__(self, 'env_vars', __record_make_env_vars__() if env_vars is __record_factory__ else env_vars)
        __record_set__(self, 'derived_env', derived_env)
        __record_set__(self, '_staged', _staged)
    return __init__
FACTORIES["def __create_fn__(__record_set__, __record_factory__, __record_default_derived_env__, __record_default__staged__, __record_make_env_vars__):\n    def __init__(self, *, job, plan, data_parallel_size, mixed_precision, env_vars=__record_factory__, derived_env=__record_default_derived_env__, _staged=__record_default__staged__):\n        __record_set__(self, 'job', job)\n        __record_set__(self, 'plan', plan)\n        __record_set__(self, 'data_parallel_size', data_parallel_size)\n        __record_set__(self, 'mixed_precision', mixed_precision)\n        __record_set__(self, 'env_vars', __record_make_env_vars__() if env_vars is __record_factory__ else env_vars)\n        __record_set__(self, 'derived_env', derived_env)\n        __record_set__(self, '_staged', _staged)\n    return __init__\n"] = __create_fn__

# megatron.bridge.training.transaction:Staged
def __create_fn__(__record_set__, __record_factory__):
    def __init__(self, work, memo, overlap):
        __record_set__(self, 'work', work)
        __record_set__(self, 'memo', memo)
        __record_set__(self, 'overlap', overlap)
    return __init__
FACTORIES["def __create_fn__(__record_set__, __record_factory__):\n    def __init__(self, work, memo, overlap):\n        __record_set__(self, 'work', work)\n        __record_set__(self, 'memo', memo)\n        __record_set__(self, 'overlap', overlap)\n    return __init__\n"] = __create_fn__

# megatron.bridge.training.userbuffers:BulkOverlapCfg
def __create_fn__(__record_set__, __record_factory__, __record_default_num_sm__, __record_default_cga_size__, __record_default_set_sm_margin__):
    def __init__(self, *, num_sm=__record_default_num_sm__, cga_size=__record_default_cga_size__, set_sm_margin=__record_default_set_sm_margin__):
        __record_set__(self, 'num_sm', num_sm)
        __record_set__(self, 'cga_size', cga_size)
        __record_set__(self, 'set_sm_margin', set_sm_margin)
        self.__post_init__()
    return __init__
FACTORIES["def __create_fn__(__record_set__, __record_factory__, __record_default_num_sm__, __record_default_cga_size__, __record_default_set_sm_margin__):\n    def __init__(self, *, num_sm=__record_default_num_sm__, cga_size=__record_default_cga_size__, set_sm_margin=__record_default_set_sm_margin__):\n        __record_set__(self, 'num_sm', num_sm)\n        __record_set__(self, 'cga_size', cga_size)\n        __record_set__(self, 'set_sm_margin', set_sm_margin)\n        self.__post_init__()\n    return __init__\n"] = __create_fn__

# megatron.bridge.training.userbuffers:PipelineOverlapCfg
def __create_fn__(__record_set__, __record_factory__, __record_default_num_sm__, __record_default_cga_size__, __record_default_num_splits__, __record_default_set_sm_margin__, __record_default_atomic_gemm__, __record_default_fp8_buf__):
    def __init__(self, *, num_sm=__record_default_num_sm__, cga_size=__record_default_cga_size__, num_splits=__record_default_num_splits__, set_sm_margin=__record_default_set_sm_margin__, atomic_gemm=__record_default_atomic_gemm__, fp8_buf=__record_default_fp8_buf__):
        __record_set__(self, 'num_sm', num_sm)
        __record_set__(self, 'cga_size', cga_size)
        __record_set__(self, 'num_splits', num_splits)
        __record_set__(self, 'set_sm_margin', set_sm_margin)
        __record_set__(self, 'atomic_gemm', atomic_gemm)
        __record_set__(self, 'fp8_buf', fp8_buf)
        self.__post_init__()
    return __init__
FACTORIES["def __create_fn__(__record_set__, __record_factory__, __record_default_num_sm__, __record_default_cga_size__, __record_default_num_splits__, __record_default_set_sm_margin__, __record_default_atomic_gemm__, __record_default_fp8_buf__):\n    def __init__(self, *, num_sm=__record_default_num_sm__, cga_size=__record_default_cga_size__, num_splits=__record_default_num_splits__, set_sm_margin=__record_default_set_sm_margin__, atomic_gemm=__record_default_atomic_gemm__, fp8_buf=__record_default_fp8_buf__):\n        __record_set__(self, 'num_sm', num_sm)\n        __record_set__(self, 'cga_size', cga_size)\n        __record_set__(self, 'num_splits', num_splits)\n        __record_set__(self, 'set_sm_margin', set_sm_margin)\n        __record_set__(self, 'atomic_gemm', atomic_gemm)\n        __record_set__(self, 'fp8_buf', fp8_buf)\n        self.__post_init__()\n    return __init__\n"] = __create_fn__

# megatron.bridge.training.userbuffers:PresetChoice
def __create_fn__(__record_set__, __record_factory__):
    def __init__(self, *, name, preset, detail):
        __record_set__(self, 'name', name)
        __record_set__(self, 'preset', preset)
        __record_set__(self, 'detail', detail)
    return __init__
FACTORIES["def __create_fn__(__record_set__, __record_factory__):\n    def __init__(self, *, name, preset, detail):\n        __record_set__(self, 'name', name)\n        __record_set__(self, 'preset', preset)\n        __record_set__(self, 'detail', detail)\n    return __init__\n"] = __create_fn__

# megatron.bridge.training.userbuffers:PresetShape
def __create_fn__(__record_set__, __record_factory__):
    def __init__(self, *, precision, gpu, hidden_size, tp_size, cp_size, micro_batch_size, seq_length, lora):
        __record_set__(self, 'precision', precision)
        __record_set__(self, 'gpu', gpu)
        __record_set__(self, 'hidden_size', hidden_size)
        __record_set__(self, 'tp_size', tp_size)
        __record_set__(self, 'cp_size', cp_size)
        __record_set__(self, 'micro_batch_size', micro_batch_size)
        __record_set__(self, 'seq_length', seq_length)
        __record_set__(self, 'lora', lora)
    return __init__
FACTORIES["def __create_fn__(__record_set__, __record_factory__):\n    def __init__(self, *, precision, gpu, hidden_size, tp_size, cp_size, micro_batch_size, seq_length, lora):\n        __record_set__(self, 'precision', precision)\n        __record_set__(self, 'gpu', gpu)\n        __record_set__(self, 'hidden_size', hidden_size)\n        __record_set__(self, 'tp_size', tp_size)\n        __record_set__(self, 'cp_size', cp_size)\n        __record_set__(self, 'micro_batch_size', micro_batch_size)\n        __record_set__(self, 'seq_length', seq_length)\n        __record_set__(self, 'lora', lora)\n    return __init__\n"] = __create_fn__

# megatron.bridge.training.userbuffers:RingExchangeOverlapCfg
def __create_fn__(__record_set__, __record_factory__, __record_default_num_sm__, __record_default_cga_size__, __record_default_set_sm_margin__, __record_default_aggregate__, __record_default_atomic_gemm__, __record_default_fp8_buf__):
    def __init__(self, *, num_sm=__record_default_num_sm__, cga_size=__record_default_cga_size__, set_sm_margin=__record_default_set_sm_margin__, aggregate=__record_default_aggregate__, atomic_gemm=__record_default_atomic_gemm__, fp8_buf=__record_default_fp8_buf__):
        __record_set__(self, 'num_sm', num_sm)
        __record_set__(self, 'cga_size', cga_size)
        __record_set__(self, 'set_sm_margin', set_sm_margin)
        __record_set__(self, 'aggregate', aggregate)
        __record_set__(self, 'atomic_gemm', atomic_gemm)
        __record_set__(self, 'fp8_buf', fp8_buf)
        self.__post_init__()
    return __init__
FACTORIES["def __create_fn__(__record_set__, __record_factory__, __record_default_num_sm__, __record_default_cga_size__, __record_default_set_sm_margin__, __record_default_aggregate__, __record_default_atomic_gemm__, __record_default_fp8_buf__):\n    def __init__(self, *, num_sm=__record_default_num_sm__, cga_size=__record_default_cga_size__, set_sm_margin=__record_default_set_sm_margin__, aggregate=__record_default_aggregate__, atomic_gemm=__record_default_atomic_gemm__, fp8_buf=__record_default_fp8_buf__):\n        __record_set__(self, 'num_sm', num_sm)\n        __record_set__(self, 'cga_size', cga_size)\n        __record_set__(self, 'set_sm_margin', set_sm_margin)\n        __record_set__(self, 'aggregate', aggregate)\n        __record_set__(self, 'atomic_gemm', atomic_gemm)\n        __record_set__(self, 'fp8_buf', fp8_buf)\n        self.__post_init__()\n    return __init__\n"] = __create_fn__

# megatron.bridge.training.userbuffers:TransformerLayerTPOverlapCfg
def __create_fn__(__record_set__, __record_factory__, __record_default_qkv_dgrad__, __record_default_qkv_wgrad__, __record_default_fc1_dgrad__, __record_default_fc1_wgrad__, __record_default_qkv_fprop__, __record_default_proj_dgrad__, __record_default_fc1_fprop__, __record_default_fc2_dgrad__, __record_default_proj_fprop__, __record_default_fc2_fprop__):
    def __init__(self, *, qkv_dgrad=__record_default_qkv_dgrad__, qkv_wgrad=__record_default_qkv_wgrad__, fc1_dgrad=__record_default_fc1_dgrad__, fc1_wgrad=__record_default_fc1_wgrad__, qkv_fprop=__record_default_qkv_fprop__, proj_dgrad=__record_default_proj_dgrad__, fc1_fprop=__record_default_fc1_fprop__, fc2_dgrad=__record_default_fc2_dgrad__, proj_fprop=__record_default_proj_fprop__, fc2_fprop=__record_default_fc2_fprop__):
        __record_set__(self, 'qkv_dgrad', qkv_dgrad)
        __record_set__(self, 'qkv_wgrad', qkv_wgrad)
        __record_set__(self, 'fc1_dgrad', fc1_dgrad)
        __record_set__(self, 'fc1_wgrad', fc1_wgrad)
        __record_set__(self, 'qkv_fprop', qkv_fprop)
        __record_set__(self, 'proj_dgrad', proj_dgrad)
        __record_set__(self, 'fc1_fprop', fc1_fprop)
        __record_set__(self, 'fc2_dgrad', fc2_dgrad)
        __record_set__(self, 'proj_fprop', proj_fprop)
        __record_set__(self, 'fc2_fprop', fc2_fprop)
        self.__post_init__()
    return __init__
FACTORIES["def __create_fn__(__record_set__, __record_factory__, __record_default_qkv_dgrad__, __record_default_qkv_wgrad__, __record_default_fc1_dgrad__, __record_default_fc1_wgrad__, __record_default_qkv_fprop__, __record_default_proj_dgrad__, __record_default_fc1_fprop__, __record_default_fc2_dgrad__, __record_default_proj_fprop__, __record_default_fc2_fprop__):\n    def __init__(self, *, qkv_dgrad=__record_default_qkv_dgrad__, qkv_wgrad=__record_default_qkv_wgrad__, fc1_dgrad=__record_default_fc1_dgrad__, fc1_wgrad=__record_default_fc1_wgrad__, qkv_fprop=__record_default_qkv_fprop__, proj_dgrad=__record_default_proj_dgrad__, fc1_fprop=__record_default_fc1_fprop__, fc2_dgrad=__record_default_fc2_dgrad__, proj_fprop=__record_default_proj_fprop__, fc2_fprop=__record_default_fc2_fprop__):\n        __record_set__(self, 'qkv_dgrad', qkv_dgrad)\n        __record_set__(self, 'qkv_wgrad', qkv_wgrad)\n        __record_set__(self, 'fc1_dgrad', fc1_dgrad)\n        __record_set__(self, 'fc1_wgrad', fc1_wgrad)\n        __record_set__(self, 'qkv_fprop', qkv_fprop)\n        __record_set__(self, 'proj_dgrad', proj_dgrad)\n        __record_set__(self, 'fc1_fprop', fc1_fprop)\n        __record_set__(self, 'fc2_dgrad', fc2_dgrad)\n        __record_set__(self, 'proj_fprop', proj_fprop)\n        __record_set__(self, 'fc2_fprop', fc2_fprop)\n        self.__post_init__()\n    return __init__\n"] = __create_fn__

# megatron.bridge.training.validators:Limit
def __create_fn__(__record_set__, __record_factory__):
    def __init__(self, minimum, maximum, why):
        __record_set__(self, 'minimum', minimum)
        __record_set__(self, 'maximum', maximum)
        __record_set__(self, 'why', why)
    return __init__
FACTORIES["def __create_fn__(__record_set__, __record_factory__):\n    def __init__(self, minimum, maximum, why):\n        __record_set__(self, 'minimum', minimum)\n        __record_set__(self, 'maximum', maximum)\n        __record_set__(self, 'why', why)\n    return __init__\n"] = __create_fn__
