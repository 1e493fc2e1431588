# The study's host with a convolutional patch stem (mmvitaccel.ConvStem:
# two 3x3 stride-2 convolutions and a 1x1 projection in place of the 4x4
# patch convolution; the same 8x8 token grid), see docs/study.md.
_base_ = ['./digits_deit_host.py']

model = dict(
    backbone=dict(
        patch_cfg=dict(
            _delete_=True, conv_type='mmvitaccel.ConvStem', kernel_size=4,
            stride=4)))
