"""A stand-in for numba-cuda, for CI where Numba is not installed: the parts of Numba's External
Memory Management interface that rap.numba uses, as Numba's documentation describes them
(numba.cuda.HostOnlyCUDAMemoryManager, MemoryPointer, PinnedMemory, MappedMemory, MemoryInfo,
IpcHandle, cudadrv.driver.CudaAPIError). tests/python/test_integrations.py puts this folder on
sys.path only when the real package is missing; the GPU machine runs the real one
(integrations/numba/run_tests.sh)."""
