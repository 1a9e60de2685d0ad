#pragma once
// Conversions between the plain message structs (common/messages.h, troika/types.h) and the
// generated protocol messages. The only code outside *_service.cc / *_client.cc that sees
// generated types.

#include "common/messages.h"
#include "troika/types.h"
#include "troika/v1/troika.pb.h"

namespace troika {

void ToWire(const TensorRequest& in, v1::Request* out);
TensorRequest FromWire(const v1::Request& in);
void ToWire(const Response& in, v1::Response* out);
Response FromWire(const v1::Response& in);
void ToWire(const Membership& in, v1::Membership* out);
Membership FromWire(const v1::Membership& in);

}  // namespace troika
