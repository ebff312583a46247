#!/usr/bin/env python3
"""cudashm_interop.py -- the calls of Triton's simple_http_cudashm_client.py,
in its order, against flatserve serving on a GPU, with the CUDA memory made
by tritonclient's own cuda_shared_memory module.

Why not the example itself: it imports tritonclient.http, whose transport
needs gevent, geventhttpclient and python-rapidjson, and its CUDA side needs
cuda-python. Debian has no cuda-python; the GPU host has cuda-python but
none of the three (it has no package access, and Debian's builds are for
another Python). This script keeps the part that interoperates at the byte
level -- the IPC handle tritonclient makes (cudaIpcGetMemHandle, base64) and
the values it writes and reads on the device -- and sends the JSON the
example's client sends (tritonclient/http/_client.py: register_cuda_shared_memory,
and infer with shared_memory_region parameters), through urllib.

Usage (flatserve serving the examples repository of make_repos.py on a GPU,
at --url, default localhost:8000; TRITON_CLIENT_SRC as run_triton_qa.py):
  TRITON_CLIENT_SRC=DIR python3 tests/triton/cudashm_interop.py [--url HOST:PORT]
Prints each call and "PASS: cuda shared memory" as the example does, and
exits 1 on the first call that fails or answers wrong.
"""
import argparse
import json
import os
import sys
import urllib.error
import urllib.request

import numpy as np


def client_library():
    src = os.environ.get("TRITON_CLIENT_SRC")
    if not src:
        sys.exit("cudashm_interop: set TRITON_CLIENT_SRC to triton-inference-server/client's tree")
    sys.path.insert(0, os.path.join(src, "src", "python", "library"))
    # The package's __init__ imports nothing else; its utils need numpy,
    # and cuda_shared_memory needs cuda-python (cuda.bindings).
    import tritonclient.utils.cuda_shared_memory as cudashm
    from tritonclient import utils
    return cudashm, utils


def call(url, method, path, body=None):
    """One request; the parsed JSON answer (None for an empty body). Exits 1
    on a status other than 200, printing the server's error."""
    data = body if body is None or isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request("http://%s/%s" % (url, path), data=data, method=method)
    if data:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            text = r.read()
    except urllib.error.HTTPError as e:
        sys.exit("%s /%s: %d %s" % (method, path, e.code, e.read().decode(errors="replace")))
    print("%s /%s: 200 %s" % (method, path, text[:300].decode(errors="replace")))
    return json.loads(text) if text else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-u", "--url", default="localhost:8000")
    url = ap.parse_args().url
    cudashm, utils = client_library()

    # As the example: start with no region registered on the server.
    call(url, "POST", "v2/systemsharedmemory/unregister", b"")
    call(url, "POST", "v2/cudasharedmemory/unregister", b"")

    input0_data = np.arange(start=0, stop=16, dtype=np.int32)
    input1_data = np.ones(shape=16, dtype=np.int32)
    input_byte_size = input0_data.size * input0_data.itemsize
    output_byte_size = input_byte_size

    def register(name, handle, byte_size):
        raw = cudashm.get_raw_handle(handle)  # base64 bytes, as the client sends them
        call(url, "POST", "v2/cudasharedmemory/region/%s/register" % name,
             {"raw_handle": {"b64": raw.decode()}, "device_id": 0, "byte_size": byte_size})

    shm_op0 = cudashm.create_shared_memory_region("output0_data", output_byte_size, 0)
    shm_op1 = cudashm.create_shared_memory_region("output1_data", output_byte_size, 0)
    register("output0_data", shm_op0, output_byte_size)
    register("output1_data", shm_op1, output_byte_size)
    shm_ip0 = cudashm.create_shared_memory_region("input0_data", input_byte_size, 0)
    shm_ip1 = cudashm.create_shared_memory_region("input1_data", input_byte_size, 0)
    cudashm.set_shared_memory_region(shm_ip0, [input0_data])
    cudashm.set_shared_memory_region(shm_ip1, [input1_data])
    register("input0_data", shm_ip0, input_byte_size)
    register("input1_data", shm_ip1, input_byte_size)

    def shm_params(region, byte_size):
        return {"shared_memory_region": region, "shared_memory_byte_size": byte_size}

    request = {
        "inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32",
             "parameters": shm_params("input0_data", input_byte_size)},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32",
             "parameters": shm_params("input1_data", input_byte_size)},
        ],
        "outputs": [
            {"name": "OUTPUT0", "parameters": shm_params("output0_data", output_byte_size)},
            {"name": "OUTPUT1", "parameters": shm_params("output1_data", output_byte_size)},
        ],
    }
    result = call(url, "POST", "v2/models/simple/infer", request)
    outputs = {o["name"]: o for o in result.get("outputs", [])}
    got = {}
    for name, handle in (("OUTPUT0", shm_op0), ("OUTPUT1", shm_op1)):
        o = outputs.get(name)
        if o is None:
            sys.exit("%s is missing in the response." % name)
        if "data" in o:
            sys.exit("%s came back in the body, not in its region: %s" % (name, o))
        got[name] = cudashm.get_contents_as_numpy(handle, utils.triton_to_np_dtype(o["datatype"]),
                                                  o["shape"])
    for i in range(16):
        print("%d + %d = %d" % (input0_data[i], input1_data[i], got["OUTPUT0"][0][i]))
        print("%d - %d = %d" % (input0_data[i], input1_data[i], got["OUTPUT1"][0][i]))
        if input0_data[i] + input1_data[i] != got["OUTPUT0"][0][i]:
            sys.exit("cudashm infer error: incorrect sum")
        if input0_data[i] - input1_data[i] != got["OUTPUT1"][0][i]:
            sys.exit("cudashm infer error: incorrect difference")

    status = call(url, "GET", "v2/cudasharedmemory/status")
    names = sorted(r.get("name") for r in status)
    if names != ["input0_data", "input1_data", "output0_data", "output1_data"]:
        sys.exit("status lists %s" % names)
    call(url, "POST", "v2/cudasharedmemory/unregister", b"")
    if call(url, "GET", "v2/cudasharedmemory/status") != []:
        sys.exit("regions left after unregister")
    assert len(cudashm.allocated_shared_memory_regions()) == 4
    for h in (shm_ip0, shm_ip1, shm_op0, shm_op1):
        cudashm.destroy_shared_memory_region(h)
    assert len(cudashm.allocated_shared_memory_regions()) == 0
    print("PASS: cuda shared memory")


if __name__ == "__main__":
    main()
