"""Every rank blocks in a reducescatter another rank never submits (the ranks diverged, as a
rank-local failed assertion makes them): the coordinator sees every rank waiting for names the
others miss and aborts the job as a deadlock, and each rank raises. run_diverged_test.py checks
that every rank printed "raised: ... deadlock" and that troikarun failed."""

import mxnet as mx
from mxnet.base import MXNetError

import troika.mxnet as hvd

hvd.init()
x = mx.nd.ones((hvd.size(), 2))
np_ok = hvd.reducescatter(x, op=hvd.Sum, name="agreed").asnumpy()  # the ranks agree here
try:
    hvd.reducescatter(x, name="diverged.%d" % hvd.rank())
    print("rank %d: no error" % hvd.rank(), flush=True)
except (MXNetError, hvd.HorovodInternalError) as e:
    print("rank %d raised: %s" % (hvd.rank(), " ".join(str(e).split())[:400]), flush=True)
