"""Large ModelInfer messages at the protobuf wire level: tensor bytes without copies.

protobuf copies a ``bytes`` field when it parses a message and again when Python reads the
field, and its serializer copies (and regrows) the whole answer; for a tensor of many MiB
those copies cost more than the rest of the call. Here a large request has its
``raw_input_contents`` fields cut out as views on the received bytes before protobuf parses
the (small) rest, and a large answer is sent as its serialized head followed by its
``raw_output_contents`` fields as separate buffers, written to the socket as they are.

Both are plain protobuf encodings: a repeated field's entries may stand anywhere in a
message, in their order. Small messages, and any message the scan cannot read simply,
go through protobuf whole.
"""

from __future__ import annotations

from typing import Final

import numpy as np

from triton_core.protos import grpc_service_pb2 as pb

#: messages of at least this many bytes take the split paths
SPLIT_THRESHOLD: Final = 1 << 18
#: top-level fields one scan reads at most; a message with more goes to protobuf whole
MAX_SCANNED_FIELDS: Final = 4096
#: protobuf's limit on a message's size
MAX_PROTOBUF_SIZE: Final = 2**31 - 1
#: the tags (field number << 3 | length-delimited) of the raw tensor fields
RAW_INPUT_TAG: Final = 7 << 3 | 2
RAW_OUTPUT_TAG: Final = 6 << 3 | 2

Buffer = bytes | memoryview
#: a raw tensor's bytes: as bytes, or a view (a flat uint8 array viewing the tensor's)
RawBuffer = bytes | memoryview | np.ndarray


class SplitInferRequest:
    """A ModelInferRequest whose ``raw_input_contents`` were cut out as views, in order."""

    __slots__ = ("message", "raw_input_contents")

    def __init__(self, message: pb.ModelInferRequest, raw_input_contents: list[memoryview]):
        self.message = message
        self.raw_input_contents = raw_input_contents


class EncodedMessage:
    """A message already encoded, as buffers to be sent one after the other."""

    __slots__ = ("parts", "size")

    def __init__(self, parts: list[RawBuffer], size: int) -> None:
        self.parts = parts
        self.size = size

    def SerializeToString(self) -> bytes:  # protobuf's name, for generic callers
        return b"".join(self.parts)  # type: ignore[arg-type]


def parse_infer_request(buffer: Buffer) -> pb.ModelInferRequest | SplitInferRequest:
    """The request in ``buffer``; a large one with its raw contents as views on ``buffer``.

    Raises protobuf's DecodeError for a message protobuf does not accept.
    """
    if len(buffer) < SPLIT_THRESHOLD:
        return pb.ModelInferRequest.FromString(buffer)  # type: ignore[arg-type]
    view = memoryview(buffer).cast("B")
    split = _split_field(view, RAW_INPUT_TAG)
    if split is None:
        return pb.ModelInferRequest.FromString(buffer)  # type: ignore[arg-type]
    rest, raws = split
    message = pb.ModelInferRequest.FromString(b"".join(rest))
    return SplitInferRequest(message, raws)


def encode_with_raw_outputs(
    message: pb.ModelInferResponse, raws: list[RawBuffer]
) -> EncodedMessage:
    """``message`` with ``raws`` appended as its ``raw_output_contents``, without copying them.

    Raises ValueError past protobuf's 2 GiB limit on a message, as its serializer would.
    """
    head = message.SerializeToString()
    parts: list[RawBuffer] = [head]
    size = len(head)
    for raw in raws:
        length = len(raw) if isinstance(raw, bytes) else raw.nbytes
        key = bytes((RAW_OUTPUT_TAG,)) + encode_varint(length)
        parts.append(key)
        if length:
            parts.append(raw)
        size += len(key) + length
    if size > MAX_PROTOBUF_SIZE:
        raise ValueError(
            f"the response of {size} bytes exceeds protobuf's limit of {MAX_PROTOBUF_SIZE}"
        )
    return EncodedMessage(parts, size)


def encode_varint(value: int) -> bytes:
    """protobuf's base-128 varint of a non-negative ``value``."""
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


class _Unreadable(Exception):
    """The scan stops: protobuf reads the message whole and says what is wrong with it."""


def _split_field(
    view: memoryview, wanted_tag: int
) -> tuple[list[memoryview], list[memoryview]] | None:
    """``view``'s top-level fields other than ``wanted_tag``'s, and the values of those.

    None when the message has more than :data:`MAX_SCANNED_FIELDS` fields or anything the
    scan does not read (groups, a truncated field): protobuf then parses it whole.
    """
    rest: list[memoryview] = []
    values: list[memoryview] = []
    end = len(view)
    position = rest_from = 0
    try:
        for _ in range(MAX_SCANNED_FIELDS):
            if position >= end:
                rest.append(view[rest_from:end])
                return rest, values
            field_start = position
            tag, position = _read_varint(view, position)
            wire_type = tag & 7
            if wire_type == 0:
                _, position = _read_varint(view, position)
            elif wire_type == 1:
                position += 8
            elif wire_type == 5:
                position += 4
            elif wire_type == 2:
                length, position = _read_varint(view, position)
                if tag == wanted_tag and position + length <= end:
                    rest.append(view[rest_from:field_start])
                    values.append(view[position : position + length])
                    rest_from = position + length
                position += length
            else:
                return None
            if position > end:
                return None
    except _Unreadable:
        return None
    return None


def _read_varint(view: memoryview, position: int) -> tuple[int, int]:
    """The varint at ``position`` and the position after it (10 bytes at most)."""
    value = shift = 0
    for index in range(position, min(position + 10, len(view))):
        byte = view[index]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, index + 1
        shift += 7
    raise _Unreadable
