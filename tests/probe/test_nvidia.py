from __future__ import annotations

import pynvml as real
from fake_nvml import GIB, FakeNvml, a100_80gb, memory_v1, memory_v2

from fitcheck.machine import SystemMemory, Unknown
from fitcheck.probe import nvidia
from fitcheck.probe.nvidia import memory_bandwidth, query, read_nvidia

RAM = SystemMemory(total_bytes=128 * GIB, available_bytes=100 * GIB)


def err(code: int) -> real.NVMLError:
    return real.NVMLError(code)


def test_bandwidth_formula_matches_datasheets():
    # (bus width bits, NVML max memory clock MHz, datasheet GB/s)
    for bus, clock, datasheet in ((5120, 1593, 2039), (5120, 2619, 3350), (384, 10501, 1008)):
        assert abs(memory_bandwidth(bus, clock) / 1e9 - datasheet) / datasheet < 0.005


def test_a100_is_read_fully():
    reading = read_nvidia({}, RAM, nvml=FakeNvml([a100_80gb()]))
    assert reading.status == ""
    assert reading.driver_version == "550.54.15" and reading.cuda_version == "12.4"
    (gpu,) = reading.gpus
    assert gpu.name == "NVIDIA A100-SXM4-80GB" and gpu.vendor == "nvidia"
    assert gpu.memory_total_bytes == 85899345920 and gpu.memory_free_bytes == 84540784640
    assert gpu.memory_reserved_bytes == 669515776
    assert gpu.compute_capability == "8.0" and gpu.fp8 is False
    assert gpu.bandwidth_bytes_per_s == 5120 // 8 * 1593 * 10**6 * 2
    assert gpu.mig_mode is False and not gpu.unified_memory


def test_fp8_from_compute_capability_8_9():
    device = dict(a100_80gb(), nvmlDeviceGetCudaComputeCapability=(8, 9), nvmlDeviceGetName="NVIDIA L4")
    (gpu,) = read_nvidia({}, RAM, nvml=FakeNvml([device])).gpus
    assert gpu.compute_capability == "8.9" and gpu.fp8 is True


def test_library_not_found_gives_no_gpus_and_a_reason():
    reading = read_nvidia({}, RAM, nvml=FakeNvml(init_error=err(real.NVML_ERROR_LIBRARY_NOT_FOUND)))
    assert reading.gpus == () and "driver not found" in reading.status
    assert isinstance(reading.driver_version, Unknown)


def test_driver_not_loaded():
    reading = read_nvidia({}, RAM, nvml=FakeNvml(init_error=err(real.NVML_ERROR_DRIVER_NOT_LOADED)))
    assert reading.gpus == () and reading.status == "NVIDIA driver not loaded"


def test_version_mismatch():
    fake = FakeNvml(init_error=err(real.NVML_ERROR_LIB_RM_VERSION_MISMATCH))
    assert isinstance(fake.init_error, real.NVMLError_LibRmVersionMismatch)
    reading = read_nvidia({}, RAM, nvml=fake)
    assert reading.gpus == () and "version mismatch" in reading.status


def test_nvml_is_initialised_once_and_shut_down():
    fake = FakeNvml([a100_80gb()])
    read_nvidia({}, RAM, nvml=fake)
    read_nvidia({}, RAM, nvml=fake)
    assert fake.calls.count("init") == 1
    nvidia._shutdown()
    assert fake.shutdowns == 1


def test_v2_memory_missing_falls_back_to_v1():
    device = a100_80gb()
    del device["memory_v2"]  # the driver lacks nvmlDeviceGetMemoryInfo_v2: FunctionNotFound
    (gpu,) = read_nvidia({}, RAM, nvml=FakeNvml([device])).gpus
    assert gpu.memory_total_bytes == 85899345920 and gpu.memory_free_bytes == 84540784640
    assert isinstance(gpu.memory_reserved_bytes, Unknown)


def test_binding_without_memory_v2_constant_falls_back_to_v1():
    (gpu,) = read_nvidia({}, RAM, nvml=FakeNvml([a100_80gb()], missing=("nvmlMemory_v2",))).gpus
    assert gpu.memory_total_bytes == 85899345920
    assert isinstance(gpu.memory_reserved_bytes, Unknown)


def test_missing_function_hides_only_its_fact():
    (gpu,) = read_nvidia({}, RAM, nvml=FakeNvml([a100_80gb()], missing=("nvmlDeviceGetMemoryBusWidth",))).gpus
    assert isinstance(gpu.bandwidth_bytes_per_s, Unknown) and "missing" in gpu.bandwidth_bytes_per_s.reason
    assert gpu.memory_total_bytes == 85899345920 and gpu.compute_capability == "8.0"


def test_query_reason_names_the_error():
    fake = FakeNvml([dict(a100_80gb(), nvmlDeviceGetName=err(real.NVML_ERROR_NOT_SUPPORTED))])
    fake.nvmlInit()
    assert query(fake, "nvmlDeviceGetName", fake.devices[0]) == Unknown("NVML: Not Supported")


def test_unified_memory_device_falls_back_to_system_ram():
    # GB10 (DGX Spark) / Jetson: no framebuffer, memory queries answer NotSupported.
    device = dict(a100_80gb(), nvmlDeviceGetName="NVIDIA GB10", nvmlDeviceGetCudaComputeCapability=(12, 1),
                  memory_v2=err(real.NVML_ERROR_NOT_SUPPORTED), memory_v1=err(real.NVML_ERROR_NOT_SUPPORTED))
    (gpu,) = read_nvidia({}, RAM, nvml=FakeNvml([device])).gpus
    assert gpu.unified_memory is True
    assert gpu.memory_total_bytes == 128 * GIB and gpu.memory_free_bytes == 100 * GIB
    assert any("unified memory" in note for note in gpu.notes)
    assert gpu.fp8 is True


def test_mig_parent_no_permission_and_instance_gaps():
    parent = dict(a100_80gb(), nvmlDeviceGetMigMode=[1, 1], nvmlDeviceGetMaxMigDeviceCount=7,
                  memory_v2=err(real.NVML_ERROR_NO_PERMISSION), memory_v1=err(real.NVML_ERROR_NO_PERMISSION))
    instance = {"nvmlDeviceGetUUID": "MIG-11111111-2222", "nvmlDeviceGetName": "NVIDIA A100-SXM4-80GB MIG 3g.40gb",
                "memory_v1": memory_v1(40 * GIB, 39 * GIB)}
    other = dict(instance, nvmlDeviceGetUUID="MIG-33333333-4444")
    fake = FakeNvml([parent], mig={0: {0: instance, 2: other, 3: err(real.NVML_ERROR_NO_PERMISSION)}})
    (gpu,) = read_nvidia({}, RAM, nvml=fake).gpus
    assert gpu.mig_mode is True
    assert gpu.memory_total_bytes == Unknown("NVML: Insufficient Permissions")
    assert gpu.name == "NVIDIA A100-SXM4-80GB" and gpu.compute_capability == "8.0"
    assert [(m.index, m.uuid, m.memory_total_bytes) for m in gpu.mig_instances] == [
        (0, "MIG-11111111-2222", 40 * GIB), (2, "MIG-33333333-4444", 40 * GIB)]
    assert any("MIG instance 3" in note for note in gpu.notes)
    assert any("MIG enabled" in note for note in gpu.notes)


def test_mig_instance_selected_by_cuda_visible_devices():
    parent = dict(a100_80gb(), nvmlDeviceGetMigMode=[1, 1], nvmlDeviceGetMaxMigDeviceCount=2)
    instance = {"nvmlDeviceGetUUID": "MIG-11111111-2222", "nvmlDeviceGetName": "MIG 1g.10gb",
                "memory_v2": memory_v2(10 * GIB, 9 * GIB, 0)}
    fake = FakeNvml([parent], mig={0: {1: instance}})
    (gpu,) = read_nvidia({"CUDA_VISIBLE_DEVICES": "MIG-1111"}, RAM, nvml=fake).gpus
    assert gpu.index == 0 and gpu.uuid == "MIG-11111111-2222" and gpu.memory_total_bytes == 10 * GIB


def test_one_lost_gpu_of_two():
    lost = dict(a100_80gb(uuid="GPU-lost"), nvmlDeviceGetHandleByIndex=err(real.NVML_ERROR_GPU_IS_LOST))
    reading = read_nvidia({}, RAM, nvml=FakeNvml([a100_80gb(), lost]))
    first, second = reading.gpus
    assert first.memory_total_bytes == 85899345920 and first.bandwidth_bytes_per_s == 640 * 1593 * 2 * 10**6
    assert first.name == "NVIDIA A100-SXM4-80GB" and first.compute_capability == "8.0"
    assert second.memory_total_bytes == Unknown("NVML: GPU is lost")
    assert "could not be opened" in second.notes[0]


def test_lost_gpu_midway_through_queries():
    partly = dict(a100_80gb(uuid="GPU-second"), memory_v2=err(real.NVML_ERROR_GPU_IS_LOST),
                  memory_v1=err(real.NVML_ERROR_GPU_IS_LOST), nvmlDeviceGetMemoryBusWidth=err(real.NVML_ERROR_GPU_IS_LOST))
    first, second = read_nvidia({}, RAM, nvml=FakeNvml([a100_80gb(), partly])).gpus
    assert first.memory_total_bytes == 85899345920
    assert second.memory_total_bytes == Unknown("NVML: GPU is lost") and not second.unified_memory
    assert second.name == "NVIDIA A100-SXM4-80GB"


def test_cuda_visible_devices_reorders_and_reindexes():
    gpus = [a100_80gb(uuid="GPU-aaaa"), dict(a100_80gb(uuid="GPU-bbbb"), nvmlDeviceGetName="NVIDIA H100 80GB HBM3")]
    reading = read_nvidia({"CUDA_VISIBLE_DEVICES": "1"}, RAM, nvml=FakeNvml(gpus))
    (gpu,) = reading.gpus
    assert gpu.index == 0 and gpu.uuid == "GPU-bbbb" and gpu.name == "NVIDIA H100 80GB HBM3"


def test_cuda_visible_devices_hiding_everything_says_so():
    reading = read_nvidia({"CUDA_VISIBLE_DEVICES": ""}, RAM, nvml=FakeNvml([a100_80gb()]))
    assert reading.gpus == () and "hides all 1 NVIDIA GPU" in reading.status
