"""rap.Buffer on a GPU, read by the frameworks without a copy: device memory through
__cuda_array_interface__ (CuPy) and DLPack (PyTorch, CuPy), pinned memory that a kernel reads,
writes on one side seen on the other, and a buffer freed on its stream once the work on it is
queued. Skips, saying why, where there is no CUDA device, CuPy or PyTorch (CI has none of them;
the GPU machine has all three).

    PYTHONPATH=<build>/python python3 test_buffer_device.py
"""
import unittest

import rap

try:
    import cupy
    HAVE_GPU = cupy.cuda.runtime.getDeviceCount() > 0
except Exception as e:   # no CuPy, or no driver or device
    cupy, HAVE_GPU, WHY = None, False, "CuPy and a CUDA device are needed: %s" % e
else:
    WHY = "no CUDA device"
try:
    import torch
except ImportError:
    torch = None

MIB = 1 << 20


@unittest.skipUnless(HAVE_GPU, WHY)
class DeviceBuffer(unittest.TestCase):
    def setUp(self):
        self.a = rap.Allocator("ResourceAwarePool(DEVICE, initial_size=64MiB)")
        self.s = cupy.cuda.Stream(non_blocking=True)

    def tearDown(self):
        self.s.synchronize()
        self.a.close()

    def test_cupy_reads_and_writes_it_through_the_array_interface(self):
        b = self.a.buffer(MIB, self.s)
        self.assertEqual(b.kind, "device")
        x = cupy.asarray(b)
        self.assertEqual((x.data.ptr, x.size, x.dtype), (int(b), MIB, cupy.uint8))
        with self.s:
            x.fill(7)
        self.s.synchronize()
        self.assertEqual(int(x.sum()), 7 * MIB)
        y = cupy.from_dlpack(b)
        self.assertEqual(y.data.ptr, int(b))
        del x, y
        b.free()   # on its stream: pending there until the stream passes the free

    @unittest.skipIf(torch is None, "PyTorch is not installed")
    def test_torch_shares_it_through_dlpack(self):
        b = self.a.buffer(4 * MIB, self.s)
        t = torch.from_dlpack(b)
        self.assertEqual((t.device.type, t.data_ptr(), t.numel()), ("cuda", int(b), 4 * MIB))
        t.fill_(3)
        torch.cuda.synchronize()
        x = cupy.asarray(b)   # the same bytes, seen by the other framework
        self.assertEqual(int(x[:MIB].sum()), 3 * MIB)
        del t, x
        b.free()

    def test_pinned_memory_is_read_by_a_kernel(self):
        p = rap.Allocator("QuickPool(PINNED)")
        try:
            b = p.buffer(MIB)
            self.assertEqual(b.kind, "pinned")
            host = b.view()   # the host's view of the same bytes
            host[:] = b"\x05" * MIB
            x = cupy.asarray(b)   # a device-addressable pointer to host memory
            self.assertEqual(int(x.sum()), 5 * MIB)
            del x
            b.free()
        finally:
            p.close()


if __name__ == "__main__":
    unittest.main(verbosity=2)
