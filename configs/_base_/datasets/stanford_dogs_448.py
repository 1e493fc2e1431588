# Stanford Dogs (120 classes) at 448x448, the hMHSA paper's transfer data,
# as pipelines for the configs that fine-tune on it
# (configs/hvit_*_dogs_448.py take the dataloaders with {{_base_.dogs_...}}).
# Layout: see configs/hvit_deit_s_dogs_448.py.
dogs_data_root = 'data/stanford_dogs'
dogs_train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(
        type='RandomResizedCrop',
        scale=448,
        backend='pillow',
        interpolation='bicubic'),
    dict(type='RandomFlip', prob=0.5, direction='horizontal'),
    dict(type='PackInputs'),
]
dogs_test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(
        type='ResizeEdge',
        scale=512,  # 448 * 256 / 224
        edge='short',
        backend='pillow',
        interpolation='bicubic'),
    dict(type='CenterCrop', crop_size=448),
    dict(type='PackInputs'),
]
# merged into the recipe's dataloaders (dataset type, sampler, workers)
dogs_train_dataloader = dict(
    batch_size=32,
    dataset=dict(data_root=dogs_data_root, pipeline=dogs_train_pipeline))
dogs_val_dataloader = dict(
    batch_size=32,
    dataset=dict(data_root=dogs_data_root, pipeline=dogs_test_pipeline))
