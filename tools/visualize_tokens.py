"""Overlay the kept and pruned patches of a token-pruned ViT on its inputs.

For each image, one PNG per pruning location: the network input (after the
test pipeline, de-normalised), with pruned patches dimmed and tinted and a
line of text giving the location and the kept count.

    python tools/visualize_tokens.py CONFIG CHECKPOINT [--num-images 8]
        [--out-dir DIR] [--montage FILE] [--tiny]
        [--cfg-options model.test_cfg.density=0.5]

Files: ``{out_dir}/{image}_stage{s}_layer{l}.png``; with ``--montage
FILE``, also all drawings in one PNG (a row per pruning location, the
images side by side).
"""
import argparse
import os
import os.path as osp
import sys

import cv2
import numpy as np
import torch
from mmengine.config import DictAction
from tqdm import tqdm

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))
sys.path.insert(0, REPO)

import mmvitaccel  # noqa: E402
from mmvitaccel.apis.harness import (  # noqa: E402
    build_model, load_config, real_data_batches)

mmvitaccel.compat.apply()  # our tools' environment fixes


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description='Draw kept/pruned patches per pruning location')
    parser.add_argument('config', help='config file (or toolbox::path)')
    parser.add_argument('checkpoint', help='checkpoint file')
    parser.add_argument('--num-images', type=int, default=8,
                        help='first images of the test set')
    parser.add_argument('--out-dir', default='work_dirs/visualize_tokens')
    parser.add_argument('--scale', type=int, default=2,
                        help='upscale the drawings by this factor')
    parser.add_argument('--montage', help='also write all drawings in '
                        'one PNG: a row per pruning location')
    parser.add_argument('--tiny', action='store_true',
                        help='apply the tiny overlay (generated data)')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='override settings of the config')
    return parser.parse_args(argv)


def denormalise(image, preprocessor):
    """``(3, H, W)`` normalised tensor -> ``(H, W, 3)`` uint8 BGR."""
    mean = getattr(preprocessor, 'mean', None)
    std = getattr(preprocessor, 'std', None)
    image = image.detach().float().cpu()
    if mean is not None and std is not None:
        image = image * std.view(-1, 1, 1).cpu() + mean.view(-1, 1, 1).cpu()
    rgb = image.permute(1, 2, 0).clamp(0, 255).byte().numpy()
    # the preprocessor turned BGR into RGB when it says so; draw BGR
    return np.ascontiguousarray(rgb[..., ::-1]) if getattr(
        preprocessor, '_channel_conversion', False) else rgb


def overlay(image, keep, grid, label, scale=2):
    """Dim and tint pruned patches, outline the grid, write ``label``.

    Args:
        image (np.ndarray): ``(H, W, 3)`` uint8.
        keep (np.ndarray): ``(h * w,)`` bool over the patch grid.
        grid (tuple[int, int]): ``(h, w)``.
        label (str): text drawn on the top-left corner.
        scale (int): upscaling factor of the drawing.

    Returns:
        np.ndarray: the drawing, uint8.
    """
    H, W = image.shape[:2]
    h, w = grid
    mask = cv2.resize(keep.reshape(h, w).astype(np.uint8), (W, H),
                      interpolation=cv2.INTER_NEAREST).astype(bool)
    out = image.astype(np.float32)
    tint = np.array([40., 40., 40.], dtype=np.float32)
    out[~mask] = 0.25 * out[~mask] + tint
    out = cv2.resize(out.clip(0, 255).astype(np.uint8),
                     (W * scale, H * scale),
                     interpolation=cv2.INTER_NEAREST)
    for i in range(1, h):
        y = i * H * scale // h
        out[y, :] = (out[y, :] * 0.6).astype(np.uint8)
    for j in range(1, w):
        x = j * W * scale // w
        out[:, x] = (out[:, x] * 0.6).astype(np.uint8)
    cv2.putText(out, label, (4, 14), cv2.FONT_HERSHEY_SIMPLEX, 0.4,
                (255, 255, 255), 1, cv2.LINE_AA)
    return out


def montage(rows, gap=2):
    """Drawings side by side, one row per list, ``gap`` white pixels
    between them (all drawings of one size).

    Args:
        rows (list[list[np.ndarray]]): ``(h, w, 3)`` uint8 drawings.
        gap (int): the separating width.

    Returns:
        np.ndarray: the montage, uint8.
    """
    h, w = rows[0][0].shape[:2]
    cols = max(len(r) for r in rows)
    out = np.full((len(rows) * (h + gap) - gap, cols * (w + gap) - gap, 3),
                  255, dtype=np.uint8)
    for i, row in enumerate(rows):
        for j, drawing in enumerate(row):
            y, x = i * (h + gap), j * (w + gap)
            out[y:y + h, x:x + w] = drawing
    return out


def main(argv=None):
    args = parse_args(argv)
    cfg = load_config(args.config, args.cfg_options, tiny=args.tiny)
    cfg.model.teacher = None
    cfg.model.token_distill_weight = 0.
    cfg.model.tis_distill_weight = 0.
    model = build_model(cfg, args.checkpoint)
    bb = model.backbone
    if not hasattr(bb, 'keep_masks'):
        raise ValueError('visualize_tokens needs a '
                         'TokenPrunedVisionTransformer backbone')
    os.makedirs(args.out_dir, exist_ok=True)
    written = []
    by_location = {}
    batches = real_data_batches(cfg, args.num_images, 1)
    for n, batch in enumerate(tqdm(batches, desc='images', unit='img')):
        with torch.no_grad():
            data = model.data_preprocessor(batch, False)
            if hasattr(model, 'set_test_cfg'):
                model.predict(data['inputs'], data['data_samples'])
            else:
                model(**data, mode='predict')
        image = denormalise(data['inputs'][0], model.data_preprocessor)
        stride = bb.patch_embed.projection.stride
        hw = (data['inputs'].shape[-2] // stride[0],
              data['inputs'].shape[-1] // stride[1])
        meta = batch['data_samples'][0].metainfo
        name = osp.splitext(osp.basename(meta.get('img_path', f'{n}')))[0]
        if not bb.keep_masks:
            raise ValueError('nothing was pruned: check the test settings')
        for s, (layer, keep) in enumerate(zip(bb.prune_before,
                                              bb.keep_masks)):
            keep = keep[0].cpu().numpy()
            label = f'before layer {layer}: {int(keep.sum())}/{keep.size}'
            drawing = overlay(image, keep, hw, label, args.scale)
            path = osp.join(args.out_dir,
                            f'{n:03d}_{name}_stage{s}_layer{layer}.png')
            cv2.imwrite(path, drawing)
            written.append(path)
            by_location.setdefault(s, []).append(drawing)
    if args.montage:
        os.makedirs(osp.dirname(osp.abspath(args.montage)), exist_ok=True)
        cv2.imwrite(args.montage,
                    montage([by_location[s] for s in sorted(by_location)]))
        print(f'wrote {args.montage}')
    print(f'wrote {len(written)} images to {args.out_dir}')
    return written


if __name__ == '__main__':
    main()
