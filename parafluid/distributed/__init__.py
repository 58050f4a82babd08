"""Transports for distributed training: deadlines, the collective communicator over
torch.distributed, the rendezvous, the ZeroMQ RPC runtime of the parameter servers, and the
launcher. Nothing here knows about programs: the ops reach these through the run context.
"""
