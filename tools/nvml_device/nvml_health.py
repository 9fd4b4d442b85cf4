"""Read, on a real GPU, the NVML calls phasewatch's GPU health reads (sources/host/gpu_nvml_health.py),
and write each answer (value, or the error NVML raised) as JSON: a fixture for the tests."""
import json, sys, time
import pynvml as nvml

def answer(fn, *args):
    try:
        value = fn(*args)
    except Exception as exc:
        return {"error": type(exc).__name__, "text": str(exc)}
    return {"value": value}

nvml.nvmlInit()
out = {"recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
       "driver": nvml.nvmlSystemGetDriverVersion(), "nvml": nvml.nvmlSystemGetNVMLVersion(),
       "binding": getattr(nvml, "__version__", None), "gpus": []}
for index in range(nvml.nvmlDeviceGetCount()):
    h = nvml.nvmlDeviceGetHandleByIndex(index)
    pci = nvml.nvmlDeviceGetPciInfo(h)
    gpu = {"index": index, "name": nvml.nvmlDeviceGetName(h),
           "pci_bus_id": pci.busId if isinstance(pci.busId, str) else pci.busId.decode(),
           "calls": {}}
    calls = gpu["calls"]
    calls["nvmlDeviceGetRetiredPagesPendingStatus"] = answer(nvml.nvmlDeviceGetRetiredPagesPendingStatus, h)
    rows = answer(nvml.nvmlDeviceGetRemappedRows, h)
    if "value" in rows:
        rows["value"] = list(rows["value"])
    calls["nvmlDeviceGetRemappedRows"] = rows
    field = getattr(nvml, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", None)
    gpu["binding_has_recovery_field"] = field is not None
    values = answer(nvml.nvmlDeviceGetFieldValues, h, [field if field is not None else 180])
    if "value" in values:
        v = values["value"][0]
        values["value"] = [{"fieldId": v.fieldId, "nvmlReturn": v.nvmlReturn, "valueType": v.valueType,
                            "uiVal": v.value.uiVal}]
    calls["nvmlDeviceGetFieldValues(recovery_action)"] = values
    for name in ("nvmlDeviceGetRetiredPages", "nvmlDeviceGetTotalEccErrors"):
        fn = getattr(nvml, name, None)
        if fn is None:
            calls[name] = {"error": "missing in binding"}
    ecc = answer(nvml.nvmlDeviceGetTotalEccErrors, h, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                 nvml.NVML_VOLATILE_ECC)
    calls["nvmlDeviceGetTotalEccErrors(uncorrected, volatile)"] = ecc
    calls["nvmlDeviceGetRetiredPages(double_bit)"] = answer(
        nvml.nvmlDeviceGetRetiredPages, h, nvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
    if "value" in calls["nvmlDeviceGetRetiredPages(double_bit)"]:
        calls["nvmlDeviceGetRetiredPages(double_bit)"]["value"] = list(calls["nvmlDeviceGetRetiredPages(double_bit)"]["value"])
    gpu["xid_events_supported"] = answer(nvml.nvmlDeviceGetSupportedEventTypes, h)
    out["gpus"].append(gpu)
nvml.nvmlShutdown()
json.dump(out, open(sys.argv[1], "w"), indent=1, default=str)
print(json.dumps(out, indent=1, default=str))
