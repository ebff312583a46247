# Dockerfile -- flatserve's image: the CUDA build (which also serves on the
# CPU when the container has no GPU) and the demo models, on NVIDIA's CUDA
# runtime image.
#
#   docker build -t flatserve .
#   docker run --gpus all -p 8000:8000 flatserve
#
# Two stages: the devel image (nvcc, cuBLAS headers) builds the server and
# writes the demo models; the runtime image, which already carries cuBLAS,
# cuBLASLt and NVIDIA's other math libraries, gets the binary, the models and only the
# shared libraries it links besides (libmicrohttpd, cJSON, protobuf-c, protobuf, zlib).
# cudart is linked statically and libcuda comes from the host's driver
# through the NVIDIA container toolkit (--gpus). OpenBLAS is in neither
# stage: only bench/gemm_bench links it, and no bench is built here.

# ---- build ---------------------------------------------------------------------
FROM nvidia/cuda:13.0.1-devel-ubuntu24.04 AS build

# The server's build dependencies from tools/deps.sh; the test-only ones
# (Criterion, libcurl, prometheus) and the bench-only one (OpenBLAS, for
# gemm_bench) are left out, since no test or bench is built here.
# libonnx-dev is here for onnx.proto alone, compiled by protoc-c; protobuf's
# compiler and library read config.pbtxt (config/model_config.proto).
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        build-essential pkg-config libmicrohttpd-dev libcjson-dev libprotobuf-c-dev zlib1g-dev \
        protobuf-c-compiler libprotobuf-dev protobuf-compiler libonnx-dev uthash-dev libbsd-dev \
    && rm -rf /var/lib/apt/lists/*

# GPU architectures compiled to machine code (PTX of the last one is kept
# for newer GPUs): A100 and H100/H200 by default.
ARG CUDA_ARCH="80 90"

WORKDIR /src
COPY . .
# CUDA_HOME is the stable symlink, so the binary's rpath names a path that
# the runtime image has too; WERROR=0 since a newer compiler's new warning
# must not fail an image build (CI builds with -Werror).
RUN make -j"$(nproc)" CUDA=1 CUDA_HOME=/usr/local/cuda WERROR=0 CUDA_ARCH="$CUDA_ARCH" \
        build/cuda/bin/flatserve models/mlp/1/model.onnx

# ---- runtime -------------------------------------------------------------------
FROM nvidia/cuda:13.0.1-runtime-ubuntu24.04

# Ubuntu 24.04's names of the libraries the binary links (t64: the 64-bit
# time_t transition), and curl for the health check.
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        libmicrohttpd12t64 libcjson1 libprotobuf-c1 libprotobuf32t64 zlib1g curl ca-certificates \
    && rm -rf /var/lib/apt/lists/*

RUN groupadd --system --gid 10001 flatserve \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin flatserve

COPY --from=build /src/build/cuda/bin/flatserve /usr/local/bin/flatserve
COPY --from=build /src/models /models
COPY docker/flatserve.json /etc/flatserve/flatserve.json
# Fails the build here, not at the first start, if a shared library is missing.
RUN ! ldd /usr/local/bin/flatserve | grep 'not found'

USER 10001:10001
EXPOSE 8000
# After the COPYs, so a fresh volume starts with the demo models and the
# default config.
VOLUME ["/models", "/etc/flatserve"]
# Ready means the models of the repository are loaded; loading on a GPU
# includes CUDA's start-up, hence the start period.
HEALTHCHECK --interval=15s --timeout=3s --start-period=60s --retries=3 \
    CMD curl -fsS -o /dev/null http://127.0.0.1:8000/v2/health/ready || exit 1

# flatserve takes SIGTERM itself (a graceful drain), so it runs as PID 1
# with no init; its drain bound (server.shutdown_timeout, 30 s) is longer
# than docker stop's default 10 s: use `docker stop -t 35`.
ENTRYPOINT ["flatserve"]
# Flags, not --config, so the image does not depend on the config file's
# keys; `docker run IMAGE --config /etc/flatserve/flatserve.json` uses the
# file instead (docker/flatserve.json: the same settings).
CMD ["--repository", "/models", "--host", "0.0.0.0", "--port", "8000"]
