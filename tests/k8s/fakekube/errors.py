"""API errors, carried to the client as `Status` objects with the server's reasons."""

REASONS = {
    400: "BadRequest",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    500: "InternalError",
}


class ApiError(Exception):
    def __init__(self, code, message, reason=None, details=None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or REASONS.get(code, "Unknown")
        self.details = details

    def status(self):
        return status_object(self.code, self.reason, self.message, self.details)


def status_object(code, reason, message, details=None):
    status = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success" if code < 400 else "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details is not None:
        status["details"] = details
    if code < 400:
        del status["message"], status["reason"]
    return status


def not_found(rt, name):
    return ApiError(404, f'{rt.resource_label()} "{name}" not found',
                    details={"name": name, "group": rt.group, "kind": rt.plural})


def already_exists(rt, name):
    return ApiError(409, f'{rt.resource_label()} "{name}" already exists', "AlreadyExists",
                    details={"name": name, "group": rt.group, "kind": rt.plural})


def conflict(rt, name, why):
    return ApiError(409, f'Operation cannot be fulfilled on {rt.resource_label()} "{name}": {why}',
                    "Conflict", details={"name": name, "group": rt.group, "kind": rt.plural})


def bad_request(message):
    return ApiError(400, message, "BadRequest")


def invalid(rt, name, causes):
    """causes: [(field, message)], phrased like the real server's field errors."""
    text = ", ".join(f"{field}: {msg}" if field else msg for field, msg in causes)
    return ApiError(
        422, f'{rt.qualified_kind()} "{name}" is invalid: {text}', "Invalid",
        details={"name": name, "group": rt.group, "kind": rt.kind,
                 "causes": [{"reason": "FieldValueInvalid", "message": msg, "field": field}
                            for field, msg in causes]})
