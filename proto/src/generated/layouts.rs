// Generated from the schemas by proto/codegen.rs: one wire layout per message.
/// Wire layout of `onnx.StringStringEntryProto`.
pub static ONNX_STRING_STRING_ENTRY_PROTO: Layout = Layout {
    name: "onnx.StringStringEntryProto",
    size: std::mem::size_of::<crate::onnx::StringStringEntryProto>(),
    fields: &[
        Field { number: 1, repeated: false, kind: Kind::String },
        Field { number: 2, repeated: false, kind: Kind::String },
    ],
};
impl Bounded for crate::onnx::StringStringEntryProto {
    fn layout() -> &'static Layout {
        &ONNX_STRING_STRING_ENTRY_PROTO
    }
}
/// Wire layout of `onnx.OperatorSetIdProto`.
pub static ONNX_OPERATOR_SET_ID_PROTO: Layout = Layout {
    name: "onnx.OperatorSetIdProto",
    size: std::mem::size_of::<crate::onnx::OperatorSetIdProto>(),
    fields: &[
        Field { number: 1, repeated: false, kind: Kind::String },
        Field { number: 2, repeated: false, kind: Kind::Varint { size: 8 } },
    ],
};
impl Bounded for crate::onnx::OperatorSetIdProto {
    fn layout() -> &'static Layout {
        &ONNX_OPERATOR_SET_ID_PROTO
    }
}
/// Wire layout of `onnx.ModelProto`.
pub static ONNX_MODEL_PROTO: Layout = Layout {
    name: "onnx.ModelProto",
    size: std::mem::size_of::<crate::onnx::ModelProto>(),
    fields: &[
        Field { number: 1, repeated: false, kind: Kind::Varint { size: 8 } },
        Field { number: 2, repeated: false, kind: Kind::String },
        Field { number: 3, repeated: false, kind: Kind::String },
        Field { number: 4, repeated: false, kind: Kind::String },
        Field { number: 5, repeated: false, kind: Kind::Varint { size: 8 } },
        Field { number: 6, repeated: false, kind: Kind::String },
        Field { number: 7, repeated: false, kind: Kind::Message { layout: &ONNX_GRAPH_PROTO, boxed: false } },
        Field { number: 8, repeated: true, kind: Kind::Message { layout: &ONNX_OPERATOR_SET_ID_PROTO, boxed: false } },
        Field { number: 14, repeated: true, kind: Kind::Message { layout: &ONNX_STRING_STRING_ENTRY_PROTO, boxed: false } },
    ],
};
impl Bounded for crate::onnx::ModelProto {
    fn layout() -> &'static Layout {
        &ONNX_MODEL_PROTO
    }
}
/// Wire layout of `onnx.GraphProto`.
pub static ONNX_GRAPH_PROTO: Layout = Layout {
    name: "onnx.GraphProto",
    size: std::mem::size_of::<crate::onnx::GraphProto>(),
    fields: &[
        Field { number: 1, repeated: true, kind: Kind::Message { layout: &ONNX_NODE_PROTO, boxed: false } },
        Field { number: 2, repeated: false, kind: Kind::String },
        Field { number: 5, repeated: true, kind: Kind::Message { layout: &ONNX_TENSOR_PROTO, boxed: false } },
        Field { number: 10, repeated: false, kind: Kind::String },
        Field { number: 11, repeated: true, kind: Kind::Message { layout: &ONNX_VALUE_INFO_PROTO, boxed: false } },
        Field { number: 12, repeated: true, kind: Kind::Message { layout: &ONNX_VALUE_INFO_PROTO, boxed: false } },
        Field { number: 13, repeated: true, kind: Kind::Message { layout: &ONNX_VALUE_INFO_PROTO, boxed: false } },
        Field { number: 16, repeated: true, kind: Kind::Message { layout: &ONNX_STRING_STRING_ENTRY_PROTO, boxed: false } },
    ],
};
impl Bounded for crate::onnx::GraphProto {
    fn layout() -> &'static Layout {
        &ONNX_GRAPH_PROTO
    }
}
/// Wire layout of `onnx.NodeProto`.
pub static ONNX_NODE_PROTO: Layout = Layout {
    name: "onnx.NodeProto",
    size: std::mem::size_of::<crate::onnx::NodeProto>(),
    fields: &[
        Field { number: 1, repeated: true, kind: Kind::String },
        Field { number: 2, repeated: true, kind: Kind::String },
        Field { number: 3, repeated: false, kind: Kind::String },
        Field { number: 4, repeated: false, kind: Kind::String },
        Field { number: 5, repeated: true, kind: Kind::Message { layout: &ONNX_ATTRIBUTE_PROTO, boxed: false } },
        Field { number: 6, repeated: false, kind: Kind::String },
        Field { number: 7, repeated: false, kind: Kind::String },
        Field { number: 8, repeated: false, kind: Kind::String },
        Field { number: 9, repeated: true, kind: Kind::Message { layout: &ONNX_STRING_STRING_ENTRY_PROTO, boxed: false } },
    ],
};
impl Bounded for crate::onnx::NodeProto {
    fn layout() -> &'static Layout {
        &ONNX_NODE_PROTO
    }
}
/// Wire layout of `onnx.AttributeProto`.
pub static ONNX_ATTRIBUTE_PROTO: Layout = Layout {
    name: "onnx.AttributeProto",
    size: std::mem::size_of::<crate::onnx::AttributeProto>(),
    fields: &[
        Field { number: 1, repeated: false, kind: Kind::String },
        Field { number: 2, repeated: false, kind: Kind::Fixed { width: 4, size: 4 } },
        Field { number: 3, repeated: false, kind: Kind::Varint { size: 8 } },
        Field { number: 4, repeated: false, kind: Kind::Bytes },
        Field { number: 5, repeated: false, kind: Kind::Message { layout: &ONNX_TENSOR_PROTO, boxed: true } },
        Field { number: 6, repeated: false, kind: Kind::Message { layout: &ONNX_GRAPH_PROTO, boxed: true } },
        Field { number: 7, repeated: true, kind: Kind::Fixed { width: 4, size: 4 } },
        Field { number: 8, repeated: true, kind: Kind::Varint { size: 8 } },
        Field { number: 9, repeated: true, kind: Kind::Bytes },
        Field { number: 10, repeated: true, kind: Kind::Message { layout: &ONNX_TENSOR_PROTO, boxed: false } },
        Field { number: 11, repeated: true, kind: Kind::Message { layout: &ONNX_GRAPH_PROTO, boxed: false } },
        Field { number: 13, repeated: false, kind: Kind::String },
        Field { number: 20, repeated: false, kind: Kind::Varint { size: 4 } },
        Field { number: 21, repeated: false, kind: Kind::String },
    ],
};
impl Bounded for crate::onnx::AttributeProto {
    fn layout() -> &'static Layout {
        &ONNX_ATTRIBUTE_PROTO
    }
}
/// Wire layout of `onnx.ValueInfoProto`.
pub static ONNX_VALUE_INFO_PROTO: Layout = Layout {
    name: "onnx.ValueInfoProto",
    size: std::mem::size_of::<crate::onnx::ValueInfoProto>(),
    fields: &[
        Field { number: 1, repeated: false, kind: Kind::String },
        Field { number: 2, repeated: false, kind: Kind::Message { layout: &ONNX_TYPE_PROTO, boxed: false } },
        Field { number: 3, repeated: false, kind: Kind::String },
    ],
};
impl Bounded for crate::onnx::ValueInfoProto {
    fn layout() -> &'static Layout {
        &ONNX_VALUE_INFO_PROTO
    }
}
/// Wire layout of `onnx.TypeProto`.
pub static ONNX_TYPE_PROTO: Layout = Layout {
    name: "onnx.TypeProto",
    size: std::mem::size_of::<crate::onnx::TypeProto>(),
    fields: &[
        Field { number: 1, repeated: false, kind: Kind::Message { layout: &ONNX_TYPE_PROTO_TENSOR, boxed: false } },
        Field { number: 6, repeated: false, kind: Kind::String },
    ],
};
impl Bounded for crate::onnx::TypeProto {
    fn layout() -> &'static Layout {
        &ONNX_TYPE_PROTO
    }
}
/// Wire layout of `onnx.TypeProto.Tensor`.
pub static ONNX_TYPE_PROTO_TENSOR: Layout = Layout {
    name: "onnx.TypeProto.Tensor",
    size: std::mem::size_of::<crate::onnx::type_proto::Tensor>(),
    fields: &[
        Field { number: 1, repeated: false, kind: Kind::Varint { size: 4 } },
        Field { number: 2, repeated: false, kind: Kind::Message { layout: &ONNX_TENSOR_SHAPE_PROTO, boxed: false } },
    ],
};
impl Bounded for crate::onnx::type_proto::Tensor {
    fn layout() -> &'static Layout {
        &ONNX_TYPE_PROTO_TENSOR
    }
}
/// Wire layout of `onnx.TensorShapeProto`.
pub static ONNX_TENSOR_SHAPE_PROTO: Layout = Layout {
    name: "onnx.TensorShapeProto",
    size: std::mem::size_of::<crate::onnx::TensorShapeProto>(),
    fields: &[
        Field { number: 1, repeated: true, kind: Kind::Message { layout: &ONNX_TENSOR_SHAPE_PROTO_DIMENSION, boxed: false } },
    ],
};
impl Bounded for crate::onnx::TensorShapeProto {
    fn layout() -> &'static Layout {
        &ONNX_TENSOR_SHAPE_PROTO
    }
}
/// Wire layout of `onnx.TensorShapeProto.Dimension`.
pub static ONNX_TENSOR_SHAPE_PROTO_DIMENSION: Layout = Layout {
    name: "onnx.TensorShapeProto.Dimension",
    size: std::mem::size_of::<crate::onnx::tensor_shape_proto::Dimension>(),
    fields: &[
        Field { number: 1, repeated: false, kind: Kind::Varint { size: 8 } },
        Field { number: 2, repeated: false, kind: Kind::String },
        Field { number: 3, repeated: false, kind: Kind::String },
    ],
};
impl Bounded for crate::onnx::tensor_shape_proto::Dimension {
    fn layout() -> &'static Layout {
        &ONNX_TENSOR_SHAPE_PROTO_DIMENSION
    }
}
/// Wire layout of `onnx.TensorProto`.
pub static ONNX_TENSOR_PROTO: Layout = Layout {
    name: "onnx.TensorProto",
    size: std::mem::size_of::<crate::onnx::TensorProto>(),
    fields: &[
        Field { number: 1, repeated: true, kind: Kind::Varint { size: 8 } },
        Field { number: 2, repeated: false, kind: Kind::Varint { size: 4 } },
        Field { number: 3, repeated: false, kind: Kind::Message { layout: &ONNX_TENSOR_PROTO_SEGMENT, boxed: false } },
        Field { number: 4, repeated: true, kind: Kind::Fixed { width: 4, size: 4 } },
        Field { number: 5, repeated: true, kind: Kind::Varint { size: 4 } },
        Field { number: 6, repeated: true, kind: Kind::Bytes },
        Field { number: 7, repeated: true, kind: Kind::Varint { size: 8 } },
        Field { number: 8, repeated: false, kind: Kind::String },
        Field { number: 9, repeated: false, kind: Kind::Bytes },
        Field { number: 10, repeated: true, kind: Kind::Fixed { width: 8, size: 8 } },
        Field { number: 11, repeated: true, kind: Kind::Varint { size: 8 } },
        Field { number: 12, repeated: false, kind: Kind::String },
        Field { number: 13, repeated: true, kind: Kind::Message { layout: &ONNX_STRING_STRING_ENTRY_PROTO, boxed: false } },
        Field { number: 14, repeated: false, kind: Kind::Varint { size: 4 } },
    ],
};
impl Bounded for crate::onnx::TensorProto {
    fn layout() -> &'static Layout {
        &ONNX_TENSOR_PROTO
    }
}
/// Wire layout of `onnx.TensorProto.Segment`.
pub static ONNX_TENSOR_PROTO_SEGMENT: Layout = Layout {
    name: "onnx.TensorProto.Segment",
    size: std::mem::size_of::<crate::onnx::tensor_proto::Segment>(),
    fields: &[
        Field { number: 1, repeated: false, kind: Kind::Varint { size: 8 } },
        Field { number: 2, repeated: false, kind: Kind::Varint { size: 8 } },
    ],
};
impl Bounded for crate::onnx::tensor_proto::Segment {
    fn layout() -> &'static Layout {
        &ONNX_TENSOR_PROTO_SEGMENT
    }
}
/// Wire layout of `lms.Graph`.
pub static LMS_GRAPH: Layout = Layout {
    name: "lms.Graph",
    size: std::mem::size_of::<crate::lms::Graph>(),
    fields: &[
        Field { number: 1, repeated: false, kind: Kind::Varint { size: 4 } },
        Field { number: 2, repeated: false, kind: Kind::String },
        Field { number: 3, repeated: true, kind: Kind::Message { layout: &LMS_TENSOR, boxed: false } },
        Field { number: 4, repeated: true, kind: Kind::Message { layout: &LMS_NODE, boxed: false } },
        Field { number: 5, repeated: true, kind: Kind::Message { layout: &LMS_EDGE, boxed: false } },
        Field { number: 6, repeated: true, kind: Kind::Varint { size: 4 } },
        Field { number: 7, repeated: true, kind: Kind::Varint { size: 4 } },
        Field { number: 8, repeated: true, kind: Kind::Varint { size: 4 } },
        Field { number: 9, repeated: true, kind: Kind::Varint { size: 4 } },
        Field { number: 10, repeated: false, kind: Kind::Message { layout: &LMS_PLAN, boxed: false } },
        Field { number: 11, repeated: true, kind: Kind::Message { layout: &LMS_METADATA, boxed: false } },
        Field { number: 12, repeated: false, kind: Kind::Varint { size: 8 } },
    ],
};
impl Bounded for crate::lms::Graph {
    fn layout() -> &'static Layout {
        &LMS_GRAPH
    }
}
/// Wire layout of `lms.Tensor`.
pub static LMS_TENSOR: Layout = Layout {
    name: "lms.Tensor",
    size: std::mem::size_of::<crate::lms::Tensor>(),
    fields: &[
        Field { number: 1, repeated: false, kind: Kind::String },
        Field { number: 2, repeated: false, kind: Kind::Varint { size: 4 } },
        Field { number: 3, repeated: true, kind: Kind::Varint { size: 8 } },
        Field { number: 4, repeated: false, kind: Kind::Varint { size: 8 } },
        Field { number: 5, repeated: false, kind: Kind::Bytes },
        Field { number: 6, repeated: false, kind: Kind::Varint { size: 4 } },
        Field { number: 7, repeated: false, kind: Kind::Varint { size: 4 } },
    ],
};
impl Bounded for crate::lms::Tensor {
    fn layout() -> &'static Layout {
        &LMS_TENSOR
    }
}
/// Wire layout of `lms.Node`.
pub static LMS_NODE: Layout = Layout {
    name: "lms.Node",
    size: std::mem::size_of::<crate::lms::Node>(),
    fields: &[
        Field { number: 1, repeated: false, kind: Kind::String },
        Field { number: 2, repeated: false, kind: Kind::String },
        Field { number: 3, repeated: false, kind: Kind::String },
        Field { number: 4, repeated: true, kind: Kind::Message { layout: &LMS_ATTRIBUTE, boxed: false } },
        Field { number: 5, repeated: false, kind: Kind::Varint { size: 1 } },
        Field { number: 6, repeated: false, kind: Kind::Varint { size: 4 } },
        Field { number: 7, repeated: false, kind: Kind::Varint { size: 4 } },
        Field { number: 8, repeated: true, kind: Kind::Message { layout: &LMS_SLOT, boxed: false } },
        Field { number: 9, repeated: true, kind: Kind::Varint { size: 4 } },
    ],
};
impl Bounded for crate::lms::Node {
    fn layout() -> &'static Layout {
        &LMS_NODE
    }
}
/// Wire layout of `lms.Slot`.
pub static LMS_SLOT: Layout = Layout {
    name: "lms.Slot",
    size: std::mem::size_of::<crate::lms::Slot>(),
    fields: &[
        Field { number: 1, repeated: false, kind: Kind::Varint { size: 4 } },
        Field { number: 2, repeated: false, kind: Kind::Varint { size: 1 } },
    ],
};
impl Bounded for crate::lms::Slot {
    fn layout() -> &'static Layout {
        &LMS_SLOT
    }
}
/// Wire layout of `lms.Edge`.
pub static LMS_EDGE: Layout = Layout {
    name: "lms.Edge",
    size: std::mem::size_of::<crate::lms::Edge>(),
    fields: &[
        Field { number: 1, repeated: false, kind: Kind::Varint { size: 4 } },
        Field { number: 2, repeated: false, kind: Kind::Varint { size: 4 } },
        Field { number: 3, repeated: false, kind: Kind::Varint { size: 4 } },
        Field { number: 4, repeated: false, kind: Kind::Varint { size: 4 } },
        Field { number: 5, repeated: false, kind: Kind::Varint { size: 4 } },
        Field { number: 6, repeated: false, kind: Kind::Varint { size: 4 } },
    ],
};
impl Bounded for crate::lms::Edge {
    fn layout() -> &'static Layout {
        &LMS_EDGE
    }
}
/// Wire layout of `lms.Attribute`.
pub static LMS_ATTRIBUTE: Layout = Layout {
    name: "lms.Attribute",
    size: std::mem::size_of::<crate::lms::Attribute>(),
    fields: &[
        Field { number: 1, repeated: false, kind: Kind::String },
        Field { number: 2, repeated: false, kind: Kind::Varint { size: 8 } },
        Field { number: 3, repeated: false, kind: Kind::Fixed { width: 4, size: 4 } },
        Field { number: 4, repeated: false, kind: Kind::String },
        Field { number: 5, repeated: false, kind: Kind::Message { layout: &LMS_INTS, boxed: false } },
        Field { number: 6, repeated: false, kind: Kind::Message { layout: &LMS_FLOATS, boxed: false } },
        Field { number: 7, repeated: false, kind: Kind::Message { layout: &LMS_STRINGS, boxed: false } },
        Field { number: 8, repeated: false, kind: Kind::Message { layout: &LMS_TENSOR_VALUE, boxed: false } },
    ],
};
impl Bounded for crate::lms::Attribute {
    fn layout() -> &'static Layout {
        &LMS_ATTRIBUTE
    }
}
/// Wire layout of `lms.Ints`.
pub static LMS_INTS: Layout = Layout {
    name: "lms.Ints",
    size: std::mem::size_of::<crate::lms::Ints>(),
    fields: &[
        Field { number: 1, repeated: true, kind: Kind::Varint { size: 8 } },
    ],
};
impl Bounded for crate::lms::Ints {
    fn layout() -> &'static Layout {
        &LMS_INTS
    }
}
/// Wire layout of `lms.Floats`.
pub static LMS_FLOATS: Layout = Layout {
    name: "lms.Floats",
    size: std::mem::size_of::<crate::lms::Floats>(),
    fields: &[
        Field { number: 1, repeated: true, kind: Kind::Fixed { width: 4, size: 4 } },
    ],
};
impl Bounded for crate::lms::Floats {
    fn layout() -> &'static Layout {
        &LMS_FLOATS
    }
}
/// Wire layout of `lms.Strings`.
pub static LMS_STRINGS: Layout = Layout {
    name: "lms.Strings",
    size: std::mem::size_of::<crate::lms::Strings>(),
    fields: &[
        Field { number: 1, repeated: true, kind: Kind::String },
    ],
};
impl Bounded for crate::lms::Strings {
    fn layout() -> &'static Layout {
        &LMS_STRINGS
    }
}
/// Wire layout of `lms.TensorValue`.
pub static LMS_TENSOR_VALUE: Layout = Layout {
    name: "lms.TensorValue",
    size: std::mem::size_of::<crate::lms::TensorValue>(),
    fields: &[
        Field { number: 1, repeated: false, kind: Kind::Varint { size: 4 } },
        Field { number: 2, repeated: true, kind: Kind::Varint { size: 8 } },
        Field { number: 3, repeated: false, kind: Kind::Bytes },
    ],
};
impl Bounded for crate::lms::TensorValue {
    fn layout() -> &'static Layout {
        &LMS_TENSOR_VALUE
    }
}
/// Wire layout of `lms.Plan`.
pub static LMS_PLAN: Layout = Layout {
    name: "lms.Plan",
    size: std::mem::size_of::<crate::lms::Plan>(),
    fields: &[
        Field { number: 1, repeated: false, kind: Kind::String },
        Field { number: 2, repeated: false, kind: Kind::Varint { size: 8 } },
        Field { number: 3, repeated: false, kind: Kind::Varint { size: 8 } },
        Field { number: 4, repeated: false, kind: Kind::String },
        Field { number: 12, repeated: false, kind: Kind::String },
        Field { number: 5, repeated: true, kind: Kind::Message { layout: &LMS_SWAP_DECISION, boxed: false } },
        Field { number: 6, repeated: true, kind: Kind::Message { layout: &LMS_RECOMPUTE_DECISION, boxed: false } },
        Field { number: 10, repeated: false, kind: Kind::Varint { size: 8 } },
        Field { number: 11, repeated: false, kind: Kind::Varint { size: 8 } },
        Field { number: 13, repeated: true, kind: Kind::Message { layout: &LMS_CONV_ALGORITHM_DECISION, boxed: false } },
    ],
};
impl Bounded for crate::lms::Plan {
    fn layout() -> &'static Layout {
        &LMS_PLAN
    }
}
/// Wire layout of `lms.ConvAlgorithmDecision`.
pub static LMS_CONV_ALGORITHM_DECISION: Layout = Layout {
    name: "lms.ConvAlgorithmDecision",
    size: std::mem::size_of::<crate::lms::ConvAlgorithmDecision>(),
    fields: &[
        Field { number: 1, repeated: false, kind: Kind::Varint { size: 4 } },
        Field { number: 2, repeated: false, kind: Kind::Varint { size: 4 } },
        Field { number: 3, repeated: false, kind: Kind::Varint { size: 8 } },
    ],
};
impl Bounded for crate::lms::ConvAlgorithmDecision {
    fn layout() -> &'static Layout {
        &LMS_CONV_ALGORITHM_DECISION
    }
}
/// Wire layout of `lms.SwapDecision`.
pub static LMS_SWAP_DECISION: Layout = Layout {
    name: "lms.SwapDecision",
    size: std::mem::size_of::<crate::lms::SwapDecision>(),
    fields: &[
        Field { number: 1, repeated: false, kind: Kind::Varint { size: 4 } },
        Field { number: 2, repeated: false, kind: Kind::Varint { size: 4 } },
        Field { number: 3, repeated: true, kind: Kind::Message { layout: &LMS_SWAP_IN_DECISION, boxed: false } },
    ],
};
impl Bounded for crate::lms::SwapDecision {
    fn layout() -> &'static Layout {
        &LMS_SWAP_DECISION
    }
}
/// Wire layout of `lms.SwapInDecision`.
pub static LMS_SWAP_IN_DECISION: Layout = Layout {
    name: "lms.SwapInDecision",
    size: std::mem::size_of::<crate::lms::SwapInDecision>(),
    fields: &[
        Field { number: 1, repeated: false, kind: Kind::Varint { size: 4 } },
        Field { number: 2, repeated: false, kind: Kind::Varint { size: 4 } },
    ],
};
impl Bounded for crate::lms::SwapInDecision {
    fn layout() -> &'static Layout {
        &LMS_SWAP_IN_DECISION
    }
}
/// Wire layout of `lms.RecomputeDecision`.
pub static LMS_RECOMPUTE_DECISION: Layout = Layout {
    name: "lms.RecomputeDecision",
    size: std::mem::size_of::<crate::lms::RecomputeDecision>(),
    fields: &[
        Field { number: 1, repeated: false, kind: Kind::Varint { size: 4 } },
        Field { number: 2, repeated: true, kind: Kind::Varint { size: 4 } },
        Field { number: 3, repeated: false, kind: Kind::Varint { size: 4 } },
    ],
};
impl Bounded for crate::lms::RecomputeDecision {
    fn layout() -> &'static Layout {
        &LMS_RECOMPUTE_DECISION
    }
}
/// Wire layout of `lms.Metadata`.
pub static LMS_METADATA: Layout = Layout {
    name: "lms.Metadata",
    size: std::mem::size_of::<crate::lms::Metadata>(),
    fields: &[
        Field { number: 1, repeated: false, kind: Kind::String },
        Field { number: 2, repeated: false, kind: Kind::String },
    ],
};
impl Bounded for crate::lms::Metadata {
    fn layout() -> &'static Layout {
        &LMS_METADATA
    }
}
