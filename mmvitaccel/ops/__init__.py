"""Pure token algorithms (plain torch; no registry, no OpenMMLab imports)."""
from mmvitaccel.ops.attention import (additive_mask, attention_logits,
                                      attention_probs, mask_logits,
                                      MASKED_LOGIT, masked_softmax,
                                      relative_position_bias,
                                      relative_position_index, sdpa_mask,
                                      window_mask)
from mmvitaccel.ops.checks import check_choice
from mmvitaccel.ops.cross_attention import cross_attention, project_key_values
from mmvitaccel.ops.cffn import (cffn_flops, cffn_params, compact_dims,
                                 CompactLinear, ffn_flops, ffn_params,
                                 RepLinear, switch_to_deploy)
from mmvitaccel.ops.dgssa import (attention_to_logits, AttentionStats,
                                  check_init_mode, INIT_MODES,
                                  init_static_logits, local_logits, LOG_EPS,
                                  MASK_VALUE, resize_static_logits,
                                  static_attention)
from mmvitaccel.ops.flops import (attention_flops, attention_params,
                                  LAYER_NORM_FLOPS, layer_norm_flops,
                                  linear_flops, mlp_flops, mlp_params,
                                  vit_layer_flops, vit_layer_params)
from mmvitaccel.ops.glad import (accuracy_metric, architecture_flops, GLAD,
                                 glad_flops, glad_search, layer_flops,
                                 retained_energy, token_counts)
from mmvitaccel.ops.hmhsa import (AttentionHallucination, check_even_heads,
                                  check_hmhsa_form, CrossHeadHallucination,
                                  hallucinated_attention, HMHSA_FORMS,
                                  IntraHeadHallucination, resolve_hmhsa_form,
                                  split_qkv_weights)
from mmvitaccel.ops.hmhsa_costs import (hmhsa_flops, hmhsa_params, mhsa_flops,
                                        mhsa_params)
from mmvitaccel.ops.hmhsa_fused import (fused_hallucinated_attention,
                                        hallucinated_keys, key_filter_operator,
                                        stacked_hallucinated_attention)
from mmvitaccel.ops.host_masks import (host_valid, padded_shape,
                                       regions_all_valid, semantic_all_valid,
                                       semantic_extent, semantic_valid_host,
                                       unpadded)
from mmvitaccel.ops.host_sync import HOST_READS, host_read, recorded_host_reads
from mmvitaccel.ops.inference_cache import eager_inference, weight_cache
from mmvitaccel.ops.keep_masks import (batch_mean_keep_mask,
                                       batch_mean_kept_index, mass_keep_mask,
                                       threshold_keep_mask, topk_keep_mask,
                                       value_keep_count, value_keep_counts)
from mmvitaccel.ops.stvit import (adaptive_bins, bin_indices, CENTRE_POOLINGS,
                                  check_pooling, IntraInterPooling,
                                  pool_centres, POOLING_MODES)
from mmvitaccel.ops.token_dropping import (gather_tokens, kept_indices,
                                           pad_kept_tokens, restore_tokens)
from mmvitaccel.ops.token_pruning import (asvit_score, BATCH_MODES,
                                          cls_attention_score, MASK_MODES,
                                          masked_attention, POLICY_GRADS,
                                          policy_weights, random_score,
                                          SCORERS, SELECTORS, tis_score)
from mmvitaccel.ops.tracing import is_capturing
from mmvitaccel.ops.windows import (check_placement, covered_token_windows,
                                    covered_tokens_mask, mask_or_none,
                                    neighbourhood_mask, neighbourhood_windows,
                                    pad_to_multiple,
                                    region_windows_with_tokens,
                                    REGION_PLACEMENTS, shift_regions,
                                    valid_extent, window_partition,
                                    window_reverse)

__all__ = [
    'additive_mask', 'attention_logits', 'attention_probs', 'mask_logits',
    'masked_softmax', 'relative_position_bias', 'relative_position_index',
    'window_mask', 'resize_static_logits', 'attention_flops', 'attention_params', 'LAYER_NORM_FLOPS',
    'layer_norm_flops', 'linear_flops', 'mlp_flops', 'mlp_params',
    'vit_layer_params',
    'cffn_flops', 'cffn_params', 'compact_dims', 'CompactLinear', 'ffn_flops',
    'ffn_params', 'RepLinear', 'switch_to_deploy', 'attention_to_logits',
    'AttentionStats', 'check_init_mode', 'INIT_MODES', 'init_static_logits',
    'local_logits', 'LOG_EPS', 'MASK_VALUE', 'static_attention',
    'accuracy_metric', 'architecture_flops', 'GLAD', 'glad_flops',
    'glad_search', 'layer_flops', 'retained_energy', 'token_counts',
    'AttentionHallucination', 'check_even_heads', 'CrossHeadHallucination',
    'hallucinated_attention', 'hmhsa_flops', 'hmhsa_params',
    'check_hmhsa_form', 'HMHSA_FORMS', 'resolve_hmhsa_form',
    'fused_hallucinated_attention', 'hallucinated_keys',
    'key_filter_operator', 'eager_inference', 'weight_cache',
    'stacked_hallucinated_attention',
    'IntraHeadHallucination', 'mhsa_flops', 'mhsa_params', 'split_qkv_weights',
    'adaptive_bins', 'bin_indices', 'CENTRE_POOLINGS', 'check_pooling',
    'IntraInterPooling', 'pool_centres', 'POOLING_MODES', 'asvit_score',
    'batch_mean_keep_mask', 'batch_mean_kept_index', 'BATCH_MODES',
    'check_choice',
    'cls_attention_score', 'gather_tokens', 'kept_indices', 'MASK_MODES',
    'masked_attention', 'MASKED_LOGIT', 'mass_keep_mask', 'pad_kept_tokens',
    'POLICY_GRADS', 'policy_weights',
    'random_score', 'restore_tokens', 'SCORERS', 'SELECTORS',
    'threshold_keep_mask',
    'tis_score', 'topk_keep_mask', 'value_keep_count', 'value_keep_counts',
    'vit_layer_flops', 'mask_or_none', 'neighbourhood_mask',
    'neighbourhood_windows', 'pad_to_multiple', 'shift_regions',
    'window_partition',
    'window_reverse', 'check_placement', 'covered_token_windows',
    'region_windows_with_tokens',
    'covered_tokens_mask', 'REGION_PLACEMENTS', 'valid_extent',
    'is_capturing', 'sdpa_mask', 'HOST_READS', 'host_read',
    'recorded_host_reads', 'host_valid', 'padded_shape', 'regions_all_valid',
    'semantic_all_valid', 'semantic_extent', 'semantic_valid_host',
    'unpadded', 'cross_attention', 'project_key_values'
]
