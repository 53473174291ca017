"""Private descriptor pool for the generated Triton protobuf modules.

tritonclient registers files with the same names ("model_config.proto",
"grpc_service.proto") in the default pool; keeping ours in a separate pool
lets both be imported in one process without conflicts.
"""

from __future__ import annotations

from google.protobuf import descriptor_pool

POOL = descriptor_pool.DescriptorPool()
