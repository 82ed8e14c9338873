//! Public-key signatures with *ring*: the keys the asymmetric schemes verify with (ed25519 for
//! Standard Webhooks' `v1a`, ECDSA P-256 for SendGrid, RSA for SNS; Pub/Sub's RS256 tokens are
//! verified by jsonwebtoken, on *ring* too) and the private keys their signing helpers use.

use std::fmt;

use ring::rand::SystemRandom;
use ring::signature::{self, EcdsaKeyPair, Ed25519KeyPair, KeyPair as _, RsaKeyPair};

use crate::der::{self, SpkiKey};

/// A key that verifies signatures.
#[derive(Clone, PartialEq, Eq)]
pub(crate) enum PublicKey {
    /// A raw 32-byte ed25519 key.
    Ed25519(Vec<u8>),
    /// An uncompressed P-256 point; signatures are ASN.1 DER.
    P256(Vec<u8>),
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Public, but long and useless in a log line.
        f.write_str(match self {
            Self::Ed25519(_) => "PublicKey(ed25519)",
            Self::P256(_) => "PublicKey(P-256)",
        })
    }
}

impl PublicKey {
    pub(crate) fn verifies(&self, message: &[&[u8]], sig: &[u8]) -> bool {
        let message = message.concat();
        let (algorithm, key): (&dyn signature::VerificationAlgorithm, _) = match self {
            Self::Ed25519(key) => (&signature::ED25519, key),
            Self::P256(key) => (&signature::ECDSA_P256_SHA256_ASN1, key),
        };
        signature::UnparsedPublicKey::new(algorithm, key)
            .verify(&message, sig)
            .is_ok()
    }

    /// An EC P-256 key from a SubjectPublicKeyInfo.
    pub(crate) fn p256_from_spki(spki: &[u8]) -> Result<Self, &'static str> {
        match der::spki_key(spki)? {
            SpkiKey::P256(point) => Ok(Self::P256(point.to_vec())),
            SpkiKey::Rsa(_) => Err("an RSA key, not ECDSA P-256"),
        }
    }
}

/// A private key, for the signing helpers.
pub(crate) enum PrivateKey {
    Ed25519(Ed25519KeyPair),
    P256(EcdsaKeyPair),
}

impl fmt::Debug for PrivateKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PrivateKey(<redacted>)")
    }
}

impl PrivateKey {
    /// An ed25519 key from its 32-byte seed, or the 64 bytes of seed and public key that
    /// libsodium and TweetNaCl call the secret key.
    pub(crate) fn ed25519(bytes: &[u8]) -> Result<Self, &'static str> {
        let pair = match bytes.len() {
            32 => Ed25519KeyPair::from_seed_unchecked(bytes),
            64 => Ed25519KeyPair::from_seed_and_public_key(&bytes[..32], &bytes[32..]),
            _ => {
                return Err(
                    "an ed25519 secret key is 32 bytes (a seed) or 64 (seed and public key)",
                );
            }
        };
        pair.map(Self::Ed25519)
            .map_err(|_| "the ed25519 seed and public key do not go together")
    }

    /// An ECDSA P-256 key from PKCS#8 DER.
    pub(crate) fn p256_from_pkcs8(der: &[u8]) -> Result<Self, &'static str> {
        EcdsaKeyPair::from_pkcs8(
            &signature::ECDSA_P256_SHA256_ASN1_SIGNING,
            der,
            &SystemRandom::new(),
        )
        .map(Self::P256)
        .map_err(|_| "not a PKCS#8 ECDSA P-256 private key")
    }

    /// The key that verifies what this key signs.
    pub(crate) fn public(&self) -> PublicKey {
        match self {
            Self::Ed25519(pair) => PublicKey::Ed25519(pair.public_key().as_ref().to_vec()),
            Self::P256(pair) => PublicKey::P256(pair.public_key().as_ref().to_vec()),
        }
    }

    pub(crate) fn sign(&self, message: &[&[u8]]) -> Vec<u8> {
        let message = message.concat();
        match self {
            Self::Ed25519(pair) => pair.sign(&message).as_ref().to_vec(),
            // ring's ECDSA signing fails only when the system's random source does.
            Self::P256(pair) => pair
                .sign(&SystemRandom::new(), &message)
                .expect("the system random source works")
                .as_ref()
                .to_vec(),
        }
    }
}

/// Which RSA signature an SNS message carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RsaHash {
    /// SHA1withRSA: SNS `SignatureVersion` 1.
    Sha1,
    /// SHA256withRSA: SNS `SignatureVersion` 2.
    Sha256,
}

/// Verifies an RSA PKCS#1 v1.5 signature with a DER `RSAPublicKey`.
pub(crate) fn rsa_verifies(key: &[u8], hash: RsaHash, message: &[&[u8]], sig: &[u8]) -> bool {
    let algorithm = match hash {
        RsaHash::Sha1 => &signature::RSA_PKCS1_2048_8192_SHA1_FOR_LEGACY_USE_ONLY,
        RsaHash::Sha256 => &signature::RSA_PKCS1_2048_8192_SHA256,
    };
    signature::UnparsedPublicKey::new(algorithm, key)
        .verify(&message.concat(), sig)
        .is_ok()
}

/// An RSA private key for the signing helpers (Pub/Sub tokens, SNS messages).
pub(crate) struct RsaSigner(RsaKeyPair);

impl fmt::Debug for RsaSigner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RsaSigner(<redacted>)")
    }
}

impl RsaSigner {
    /// From PKCS#8 DER, or PEM (`PRIVATE KEY`).
    pub(crate) fn new(key: &[u8]) -> Result<Self, &'static str> {
        let der = match std::str::from_utf8(key) {
            Ok(text) if text.contains("-----BEGIN") => {
                der::base64_or_pem(text).ok_or("the PEM private key does not decode")?
            }
            _ => key.to_vec(),
        };
        RsaKeyPair::from_pkcs8(&der)
            .map(Self)
            .map_err(|_| "not a PKCS#8 RSA private key of 2048 bits or more")
    }

    /// An RSA PKCS#1 v1.5 SHA-256 signature (*ring* does not sign with SHA-1).
    pub(crate) fn sign_sha256(&self, message: &[u8]) -> Vec<u8> {
        let padding = &signature::RSA_PKCS1_SHA256;
        let mut out = vec![0; self.0.public().modulus_len()];
        // Fails only on a random source failure or a buffer of the wrong size (sized above).
        self.0
            .sign(padding, &SystemRandom::new(), message, &mut out)
            .expect("RSA signing with a buffer of the modulus' length");
        out
    }

    /// The public key's modulus and exponent, big-endian without leading zeros (a JWK's `n`, `e`).
    pub(crate) fn components(&self) -> (Vec<u8>, Vec<u8>) {
        let c: signature::RsaPublicKeyComponents<Vec<u8>> = self.0.public().into();
        (c.n, c.e)
    }
}
