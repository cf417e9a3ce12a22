//! ApiVersions responses built from the one version table, [`crate::versions`].

use kafka_protocol::ResponseError;
use kafka_protocol::messages::ApiVersionsResponse;
use kafka_protocol::messages::api_versions_response::ApiVersion;

use crate::versions::SUPPORTED_APIS;

/// The answer to an ApiVersions request at a version we speak: every API with its advertised
/// range. No feature lists: they are tagged fields, left out at their defaults.
pub fn response() -> ApiVersionsResponse {
    ApiVersionsResponse::default().with_api_keys(api_keys())
}

/// The answer to an ApiVersions request at a version we do not speak: error 35
/// (UNSUPPORTED_VERSION) with our ranges, which `encode_response` writes in a v0 body so the
/// client can pick a version and ask again.
pub fn unsupported_version_response() -> ApiVersionsResponse {
    response().with_error_code(ResponseError::UnsupportedVersion.code())
}

fn api_keys() -> Vec<ApiVersion> {
    SUPPORTED_APIS
        .iter()
        .map(|s| {
            ApiVersion::default()
                .with_api_key(s.api_key as i16)
                .with_min_version(s.advertised_min)
                .with_max_version(s.max)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_every_supported_api_with_its_advertised_range() {
        let response = response();
        assert_eq!(response.error_code, 0);
        assert_eq!(response.api_keys.len(), SUPPORTED_APIS.len());
        let produce = &response.api_keys[0];
        assert_eq!(
            (produce.api_key, produce.min_version, produce.max_version),
            (0, 0, 12)
        );
        assert_eq!(unsupported_version_response().error_code, 35);
    }
}
